"""What is shipped: the package carries the Apache License its metadata names."""

from __future__ import annotations

import hashlib
import tomllib

from tests.conftest import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
"""https://www.apache.org/licenses/LICENSE-2.0.txt (and Debian's /usr/share/common-licenses/Apache-2.0)."""


def test_the_license_is_the_apache_license_verbatim() -> None:
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256
    assert (PROJECT["project"]["license"], PROJECT["project"]["license-files"]) == ("Apache-2.0", ["LICENSE"])
