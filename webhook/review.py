"""AdmissionReview v1 on the wire: parse a request strictly, build a response from a Decision.

Two kinds of failure stay apart (kopf's AdmissionError / WebhookError):
    BadReview      the body is not an AdmissionReview v1 -> HTTP 400, nothing admitted or denied
    Decision(allowed=False)  a policy denial -> HTTP 200, `allowed: false`, `status.code` 400 and a message
"""

from __future__ import annotations

import gc
from typing import Annotated, Any, Final, Literal

import msgspec
import orjson

from gpupack.core.validation import describe_msgspec
from gpupack.webhook.mutate import Decision
from gpupack.webhook.patches import encode_patch

API_VERSION: Final = "admission.k8s.io/v1"


Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class BadReview(ValueError):
    """The request body is not a usable AdmissionReview v1; the message says what is wrong."""


class _Wire(msgspec.Struct, rename="camel"):
    # Fields the webhook does not read (userInfo, oldObject, options...) are skipped when decoding: nothing reads
    # them, and decoding them costs time on every admission.
    pass


class GroupVersionKind(_Wire):
    """`request.kind`: what the object is."""

    kind: str
    group: str = ""
    version: str = ""


NO_OBJECT: Final = msgspec.Raw(b"null")


class AdmissionRequest(_Wire):
    """The fields of `request` the webhook reads (admission/v1 types.go)."""

    uid: Annotated[str, msgspec.Meta(min_length=1)]
    kind: GroupVersionKind
    operation: Operation
    namespace: str | None = None
    name: str | None = None
    object: msgspec.Raw = NO_OBJECT
    """The object's JSON text, undecoded: a Pod is read by the planner (`webhook.mutate.plan_json`), other
    kinds not at all."""
    dry_run: bool | None = None


class AdmissionReview(_Wire):
    """The envelope; only v1 is served (the registration lists `admissionReviewVersions: ["v1"]`)."""

    api_version: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


_DECODER = msgspec.json.Decoder(AdmissionReview)


LARGE_BODY = 64 * 1024
"""Reviews from this size on (the API server's are a few KiB) are handled one at a time, with the garbage
collector paused (`PAUSED_GC`): see `webhook.app._handle_large`."""


class _CollectorPause:
    """Keeps the garbage collector off while large reviews are decoded, planned and freed.

    A 3 MiB review holds hundreds of thousands of objects, none of them garbage; a collection that starts while
    they live walks every one (it made decoding a pod of 47,000 node selector terms hold the event loop 55 ms
    instead of 33 ms). Freeing them gives the allocation count back, so when the collector resumes no collection
    is due on their account. Blocks may overlap (two large reviews at once): the collector resumes, if it ran
    before, when the last one ends. One per process, like the collector itself.
    """

    def __init__(self) -> None:
        self._open = 0
        self._resume = False

    def __enter__(self) -> None:
        if self._open == 0:
            self._resume = gc.isenabled()
            gc.disable()
        self._open += 1

    def __exit__(self, *_exc: object) -> None:
        self._open -= 1
        if self._open == 0 and self._resume:
            gc.enable()


PAUSED_GC = _CollectorPause()


def parse_review(body: bytes) -> AdmissionReview:
    """Parse a request body; raises BadReview naming the problem (`request.uid: Field required`).

    The envelope is decoded straight into its model, skipping what the webhook does not read; the object stays
    JSON text. A body that does not decode that way is decoded whole (orjson) and checked again, which names
    what is wrong: not JSON, not an object, or the field (JSON text nested too deeply for the first decoder is
    one such body).
    """
    try:
        return _DECODER.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return _decode_whole(body)


def _decode_whole(body: bytes) -> AdmissionReview:
    """`parse_review` the slow way, which says what is wrong: the whole body decoded, then checked."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"the body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadReview("the body must be a JSON object (an AdmissionReview)")
    request = data.get("request")
    if isinstance(request, dict) and "object" in request:
        data["request"] = {**request, "object": msgspec.Raw(orjson.dumps(request["object"]))}
    try:
        return msgspec.convert(data, AdmissionReview)
    except msgspec.ValidationError as exc:
        raise BadReview(f"not an AdmissionReview v1: {describe_msgspec(exc, whole='(body)')}") from exc


def build_response(uid: str, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview answering `uid` with `decision`."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {"status": "Failure", "code": 400, "reason": "BadRequest", "message": decision.message}
    elif decision.ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = encode_patch(decision.ops)
    if decision.warnings:
        response["warnings"] = decision.warnings
    if decision.audit_annotations:
        response["auditAnnotations"] = decision.audit_annotations
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def error_response(uid: str, message: str) -> dict[str, Any]:
    """A refusal for an internal error: the pod is not created unmutated, and the reason is visible."""
    return {
        "apiVersion": API_VERSION,
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": False,
            "status": {"status": "Failure", "code": 500, "reason": "InternalError", "message": message},
        },
    }
