"""AdmissionReview v1 on the wire: parse a request strictly, build a response from a Decision.

Two kinds of failure stay apart (kopf's AdmissionError / WebhookError):
    BadReview      the body is not an AdmissionReview v1 -> HTTP 400, nothing admitted or denied
    Decision(allowed=False)  a policy denial -> HTTP 200, `allowed: false`, `status.code` 400 and a message
"""

from __future__ import annotations

import gc
from typing import Any, Final, Literal, TypeGuard, get_args

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from gpupack.validation import describe
from webhook.mutate import Decision
from webhook.patches import encode_patch

API_VERSION: Final = "admission.k8s.io/v1"


Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class BadReview(ValueError):
    """The request body is not a usable AdmissionReview v1; the message says what is wrong."""


class _Wire(BaseModel):
    # Fields the webhook does not read (userInfo, oldObject, options...) are ignored, not kept: nothing reads
    # them from the model, and keeping them costs time on every admission.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class GroupVersionKind(_Wire):
    """`request.kind`: what the object is."""

    group: str = ""
    version: str = ""
    kind: str


class AdmissionRequest(_Wire):
    """The fields of `request` the webhook reads (admission/v1 types.go)."""

    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    operation: Operation
    namespace: str | None = None
    name: str | None = None
    object: Any = None
    """The Pod; validated by the planner's partial model, not twice."""
    dry_run: bool | None = None


class AdmissionReview(_Wire):
    """The envelope; only v1 is served (the registration lists `admissionReviewVersions: ["v1"]`)."""

    api_version: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


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
    """Parse a request body; raises BadReview naming the problem (`request.uid: Field required`)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"the body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadReview("the body must be a JSON object (an AdmissionReview)")
    quick = _well_formed(data)
    if quick is not None:
        return quick
    try:
        return AdmissionReview.model_validate(data)
    except ValidationError as exc:
        raise BadReview(f"not an AdmissionReview v1: {describe(exc, whole='(body)')}") from exc


_OPERATIONS = frozenset(get_args(Operation))


def _is_operation(value: object) -> TypeGuard[Operation]:
    """One of the admission operations (a list or an object there is unhashable: test the type first)."""
    return type(value) is str and value in _OPERATIONS


def _well_formed(data: dict[str, Any]) -> AdmissionReview | None:
    """The review, built without validation when every field the models declare is already of the right type
    and value (what the API server always sends); None sends the body through `model_validate`, which names
    the problem. Validating the envelope with pydantic was 8% of the webhook's CPU per admission.
    """
    request = data.get("request")
    if (
        data.get("apiVersion") != API_VERSION
        or data.get("kind") != "AdmissionReview"
        or type(request) is not dict
        or set(data) - {"apiVersion", "kind", "request", "response"}
    ):
        return None
    uid, kind, operation = request.get("uid"), request.get("kind"), request.get("operation")
    namespace, name, dry_run = request.get("namespace"), request.get("name"), request.get("dryRun")
    if (
        type(uid) is not str
        or not uid
        or type(kind) is not dict
        or type(kind.get("kind")) is not str
        or not all(type(kind.get(k, "")) is str for k in ("group", "version"))
        or not _is_operation(operation)
        or not (namespace is None or type(namespace) is str)
        or not (name is None or type(name) is str)
        or not (dry_run is None or type(dry_run) is bool)
    ):
        return None
    gvk = GroupVersionKind.model_construct(
        group=kind.get("group", ""), version=kind.get("version", ""), kind=kind["kind"]
    )
    req = AdmissionRequest.model_construct(
        uid=uid,
        kind=gvk,
        operation=operation,
        namespace=namespace,
        name=name,
        object=request.get("object"),
        dry_run=dry_run,
    )
    return AdmissionReview.model_construct(api_version=API_VERSION, kind="AdmissionReview", request=req)


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
