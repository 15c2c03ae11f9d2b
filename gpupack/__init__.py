"""gpupack's shared core: the policy, the webhook/extender contract, partial Kubernetes models, quantities,
the GPU catalog, the server bootstrap and the command line."""

from importlib.metadata import PackageNotFoundError, version


def _version() -> str:
    """The version pyproject.toml declares, its one place: read from the installed distribution's metadata.

    A source tree that was never installed (say, `PYTHONPATH=.` on a checkout) has no metadata; there it is
    read from the pyproject.toml beside the package, and "0+unknown" when there is none either.
    """
    try:
        return version("gpupack")
    except PackageNotFoundError:
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        if not pyproject.is_file():
            return "0+unknown"
        declared: str = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
        return declared


__version__ = _version()
