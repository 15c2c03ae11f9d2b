"""The API server's audit log, read back: every request a service account made and the API server's answer.

A real control plane judges a command's requests by its RBAC and answers them; the audit log is where a test sees
both, in order, without a proxy in between: the verb, the object, the query (a field selector), a patch's body,
the object answered, and the status code. Only service accounts are recorded (`POLICY`): the test's own admin
calls and the stand-ins' are not the subject.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpupack.testing.control_plane import ControlPlane

POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "RequestResponse", "userGroups": ["system:serviceaccounts"]}, {"level": "None"}],
}
"""One event per request (at ResponseComplete) of any service account, with the request's and the answer's
bodies; nothing for anyone else."""


def audited_plane(workdir: Path, level: str = "RequestResponse") -> ControlPlane:
    """A control plane (not started) whose API server writes the audit log `workdir/audit.log`, at `level` for
    service accounts (`Metadata` when only who asked what, and the answer's code, matter)."""
    workdir.mkdir(parents=True, exist_ok=True)
    policy = workdir / "audit-policy.json"
    rules = [{**POLICY["rules"][0], "level": level}, POLICY["rules"][1]]  # type: ignore[index]
    policy.write_text(json.dumps({**POLICY, "rules": rules}))
    log = workdir / "audit.log"
    return ControlPlane(workdir / "plane", [f"--audit-policy-file={policy}", f"--audit-log-path={log}"])


def audit_of(plane: ControlPlane) -> AuditLog:
    """The audit log of a plane `audited_plane` made."""
    return AuditLog(plane.workdir.parent / "audit.log")


def service_account_user(namespace: str, name: str) -> str:
    """The user name the API server gives a ServiceAccount's token."""
    return f"system:serviceaccount:{namespace}:{name}"


@dataclass(frozen=True)
class Request:
    """One request as the audit log holds it."""

    user: str
    verb: str
    """The authorizer's verb: get, list, watch, create, patch, update, delete."""
    resource: str
    group: str
    namespace: str | None
    name: str | None
    subresource: str | None
    uri: str
    code: int
    body: Any
    """The request's body as sent (a patch: the patch itself), None for reads."""
    answer: Any
    """The object (or Status) the API server answered."""

    @property
    def query(self) -> dict[str, str]:
        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.uri).query))

    @property
    def refused(self) -> bool:
        """Refused for lack of permission (RBAC answers 403)."""
        return self.code == 403


def parse(event: dict[str, Any]) -> Request:
    ref = event.get("objectRef") or {}
    return Request(
        user=event["user"]["username"],
        verb=event["verb"],
        resource=ref.get("resource", ""),
        group=ref.get("apiGroup", ""),
        namespace=ref.get("namespace"),
        name=ref.get("name"),
        subresource=ref.get("subresource"),
        uri=event["requestURI"],
        code=int((event.get("responseStatus") or {}).get("code") or 0),
        body=event.get("requestObject"),
        answer=event.get("responseObject"),
    )


class AuditLog:
    """The audit log file, read from a mark (its size when a test started) on."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """Where the requests from now on start."""
        return self.path.stat().st_size if self.path.exists() else 0

    def requests(self, since: int = 0, user: str | None = None, settle: float = 0.3) -> list[Request]:
        """The requests recorded after `since` (of `user` only, when given), in the order they completed.

        The API server writes an event once the answer has gone out, so the last one can land a moment after the
        client has it: the file is read once it has not grown for `settle` seconds."""
        size = -1
        while (now := self.mark()) != size:
            size = now
            time.sleep(settle)
        with self.path.open("rb") as log:
            log.seek(since)
            lines = log.read(size - since).splitlines()
        found = [parse(json.loads(line)) for line in lines if line.strip()]
        return [r for r in found if user is None or r.user == user]


def refusals(requests: Iterable[Request]) -> list[str]:
    """The requests RBAC refused, as `verb resource namespace/name` lines (any is a defect of the RBAC)."""
    return [f"{r.verb} {r.resource} {r.namespace or ''}/{r.name or ''}: {r.uri}" for r in requests if r.refused]


def verbs(requests: Iterable[Request]) -> set[tuple[str, str, str]]:
    """(verb, API group, resource) of each request: what RBAC had to allow."""
    return {(r.verb, r.group, r.resource) for r in requests}


def subject_can(
    plane: ControlPlane,
    user: str,
    verb: str,
    resource: str,
    namespace: str | None = None,
    name: str | None = None,
    group: str = "",
    subresource: str | None = None,
) -> bool:
    """Whether the API server's authorizer allows `user` (a ServiceAccount's, with its groups) the request: a
    SubjectAccessReview, RBAC's own answer rather than a reading of the rules."""
    _, account_namespace, _ = user.rsplit(":", 2)
    attributes = {"verb": verb, "resource": resource, "group": group}
    if namespace is not None:
        attributes["namespace"] = namespace
    if name is not None:
        attributes["name"] = name
    if subresource is not None:
        attributes["subresource"] = subresource
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{account_namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": attributes,
        },
    }
    answer = plane.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))
