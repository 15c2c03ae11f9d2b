"""What one huge request costs the extender in memory: `python -m bench.extender.request_memory [--body-mib N]`.

Each shape of ExtenderArgs below is built up to the body limit (64 MiB by default) and POSTed once, from this
process, to a `gpupack` extender app serving a small cluster in a child process of its own. The child's peak
RSS (VmHWM, reset through /proc/PID/clear_refs just before the request) minus its RSS before the request is
what the request cost: aiohttp's buffers, the decoded JSON, the verbs' work and the answer. The extender's
steady RSS (about 330 MB with 150,000 pods, `make bench-extender`) plus the worst of these must stay under the
Deployment's 1 Gi limit.

The shapes: the worst for decoding within the body limit (NodeNames of one-character names, a NodeList of
minimal nodes, a Pod field of empty objects, one long string with an astral character), a realistic NodeList
(Node objects of about 6 KB with managedFields and images, as kube-scheduler sends them), and the ones that
fit the caps (a NodeList of 5,000 realistic nodes, 15,000 node names).
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from subprocess import Popen

import orjson

from gpupack.extender.wire import BYTES_PER_VALUE, MAX_DECODED_BYTES, decoded_bytes_bound
from gpupack.testing.net import free_port, wait_port
from gpupack.testing.nodes import realistic_node

MIB = 2**20
POD = {
    "metadata": {"name": "p", "namespace": "ml", "uid": "uid-p", "labels": {"gpupack.io/workload": "training"}},
    "spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]},
}
CHILD = """
import sys
from aiohttp import web
from prometheus_client import CollectorRegistry
from gpupack.extender.app import Extender, ExtenderSettings, make_app
from gpupack.extender.service import load_lists
from gpupack.extender.state import ClusterState
from gpupack.core.policy import parse_policy
from gpupack.core.policy_store import LoadedPolicy, PolicyStore
nodes = [{"metadata": {"name": f"n{i}"}, "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "8"}}}
         for i in range(100)]
store = PolicyStore(None, LoadedPolicy(parse_policy(b""), "bench"))
state = ClusterState()
load_lists(state, nodes, [], store.policy)
state.synced = True
app = make_app(Extender(store, state, ExtenderSettings()), CollectorRegistry())
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def _fill(head: bytes, item: Callable[[int], bytes], tail: bytes, limit: int, count: int | None = None) -> bytes:
    """`head`, then `item(i)` joined by commas until `limit` bytes (or `count` items), then `tail`."""
    parts, size, i = [], len(head) + len(tail), 0
    while (count is None or i < count) and size + len(piece := item(i)) + 1 < limit:
        parts.append(piece)
        size += len(piece) + 1
        i += 1
    return head + b",".join(parts) + tail


def shapes(limit: int) -> dict[str, bytes]:
    """The ExtenderArgs bodies measured, by name."""
    pod = orjson.dumps(POD)
    names = b'{"Pod":' + pod + b',"NodeNames":['
    nodes = b'{"Pod":' + pod + b',"NodeNames":null,"Nodes":{"items":['
    stuffed = orjson.loads(pod)
    stuffed["metadata"]["annotations"] = {"x": "\U0001f600" + "a" * (limit - 400)}
    # the worst that passes the estimate: 1-key objects nested 100 deep (184 bytes a value), alone or beside an
    # emoji string (four bytes a character)
    chain = b'{"a":' * 100 + b"0" + b"}" * 100
    per_chain = 101 * BYTES_PER_VALUE + len(chain) + 1  # 100 objects and a comma, and the characters
    nested = MAX_DECODED_BYTES // per_chain - 10
    beside = MAX_DECODED_BYTES // 2 // (per_chain + 3 * len(chain)) - 10  # the emoji makes every byte count 4
    half = orjson.loads(pod)
    half["metadata"]["annotations"] = {"x": "\U0001f600" + "a" * (MAX_DECODED_BYTES // 8 - 400)}
    mixed = b'{"Pod":' + orjson.dumps(half)[:-1] + b',"x":[' + b",".join([chain] * beside) + b"]}"
    minimal = lambda i: b'{"metadata":{"name":"n%d"}}' % i  # noqa: E731
    return {
        "NodeNames, one-character names": _fill(names, lambda i: b'"a"', b"]}", limit),
        "NodeNames, 15,000 names": _fill(names, lambda i: b'"node-%06d"' % i, b"]}", limit, 15_000),
        "NodeList, minimal nodes": _fill(nodes, minimal, b"]}}", limit),
        "NodeList, realistic nodes": _fill(nodes, lambda i: orjson.dumps(realistic_node(i)), b"]}}", limit),
        "NodeList, 5,000 realistic nodes": _fill(nodes, lambda i: orjson.dumps(realistic_node(i)), b"]}}", limit, 5000),
        "Pod field of empty objects": b'{"Pod":{"x":['
        + b",".join([b"{}"] * ((limit - 100) // 3))
        + b'], "spec":{}},"NodeNames":["n1"]}',
        "one string with an astral character": b'{"Pod":' + orjson.dumps(stuffed) + b',"NodeNames":["n1"]}',
        "nested one-key objects at the estimate's limit": b'{"Pod":{"spec":{},"x":['
        + b",".join([chain] * nested)
        + b']},"NodeNames":["n1"]}',
        "half nested objects, half an emoji string": mixed + b',"NodeNames":["n1"]}',
        "NodeList, 15,000 minimal nodes": _fill(nodes, minimal, b"]}}", limit, 15_000),
        "NodeNames, 15,000 copies of one name": _fill(names, lambda i: b'"n1"', b"]}", limit, 15_000),
        "NodeNames, 100,000 copies of one name": _fill(names, lambda i: b'"n1"', b"]}", limit, 100_000),
    }


def _kib(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(text.split(f"{field}:")[1].split()[0])


def measure(body: bytes) -> tuple[float, float, str]:
    """(RSS before, peak RSS added by the request, MB; the answer's first bytes) for one request on a fresh
    server."""
    port = free_port()
    child = Popen([sys.executable, "-c", CHILD, str(port)])
    try:
        wait_port(port, 60)
        base = f"http://127.0.0.1:{port}/filter"
        urllib.request.urlopen(base, data=orjson.dumps({"Pod": POD, "NodeNames": ["n1"]}), timeout=30).read()
        time.sleep(0.2)
        Path(f"/proc/{child.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = _kib(child.pid, "VmRSS")
        with urllib.request.urlopen(base, data=body, timeout=120) as reply:
            answer = reply.read()
        peak = _kib(child.pid, "VmHWM")
        return before / 1024, (peak - before) / 1024, answer[:160].decode(errors="replace")
    finally:
        child.terminate()
        child.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--body-mib", type=float, default=64.0, help="size the unbounded shapes are built to")
    args = parser.parse_args()
    print("| shape | body MB | estimate MiB | RSS before MB | peak added MB | answer |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, body in shapes(int(args.body_mib * MIB)).items():
        estimate = decoded_bytes_bound(body) / MIB
        before, added, answer = measure(body)
        print(f"| {name} | {len(body) / 1e6:.1f} | {estimate:,.0f} | {before:.0f} | {added:.0f} | `{answer[:100]}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
