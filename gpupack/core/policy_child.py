"""Parse and validate a policy document in a child process: `python -m gpupack.policy_child SOURCE < policy.yaml`.

Parsing YAML holds the interpreter lock in long stretches of C: a 1 MiB policy of small mappings stalled the
event loop for 270 ms even from a worker thread, and every admission waited. In a child process it stalls
nothing, and its memory (tens of MB of YAML nodes for a large document) is gone when the child exits. The child
writes a pickle of `("ok", Policy)` or `("error", message)` to standard output; the parent trusts it because it
is this module's own output, computed by the safe loader from data, never code.
"""

from __future__ import annotations

import pickle
import resource
import sys

from gpupack.core.policy import MAX_POLICY_BYTES, PolicyError, parse_policy

ADDRESS_SPACE = 192 * 1024 * 1024
"""The child's address space (RLIMIT_AS). It shares the service's memory limit: the interpreter with its
libraries takes about 40 MB; a valid 1 MiB policy about 50 MB more; a 1 MiB document of 30,000 small mappings,
which no valid policy is, took 171 MB and now ends in a MemoryError, refused like any invalid document."""


def main(argv: list[str]) -> int:
    """Read one document from standard input, answer on standard output; 0 whether or not it validates."""
    source = argv[1] if len(argv) > 1 else "policy"
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > ADDRESS_SPACE:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, hard))
    raw = sys.stdin.buffer.read(MAX_POLICY_BYTES + 1)
    try:
        answer: tuple[str, object] = ("ok", parse_policy(raw, source, empty_is_default=False))
    except PolicyError as exc:
        answer = ("error", str(exc))
    except MemoryError:
        answer = ("error", f"{source}: too large to parse within {ADDRESS_SPACE // 2**20} MiB")
    sys.stdout.buffer.write(pickle.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
