"""Parse and validate a policy document in a child process: `python -m gpupack.policy_child SOURCE < policy.yaml`.

Parsing YAML holds the interpreter lock in long stretches of C: a 1 MiB policy of small mappings stalled the
event loop for 270 ms even from a worker thread, and every admission waited. In a child process it stalls
nothing, and its memory (tens of MB of YAML nodes for a large document) is gone when the child exits. The child
writes a pickle of `("ok", Policy)` or `("error", message)` to standard output; the parent trusts it because it
is this module's own output, computed by the safe loader from data, never code.
"""

from __future__ import annotations

import pickle
import sys

from gpupack.policy import MAX_POLICY_BYTES, PolicyError, parse_policy


def main(argv: list[str]) -> int:
    """Read one document from standard input, answer on standard output; 0 whether or not it validates."""
    source = argv[1] if len(argv) > 1 else "policy"
    raw = sys.stdin.buffer.read(MAX_POLICY_BYTES + 1)
    try:
        answer: tuple[str, object] = ("ok", parse_policy(raw, source, empty_is_default=False))
    except PolicyError as exc:
        answer = ("error", str(exc))
    sys.stdout.buffer.write(pickle.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
