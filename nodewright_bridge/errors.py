"""Errors raised by the Kubernetes side of nodewright-bridge, classified by what to do next.

Why classify by retry semantics and not by origin: the work queue, the write helpers and the drain
code decide *whether and when to try again* from the kind of error alone. A 409 means "re-read and
retry now", a 429 from the Eviction API means "a PodDisruptionBudget refused; wait Retry-After", a
403 means "our RBAC is wrong; retrying will not help", a connection reset means "back off and try
again". HTTP error answers and the transport's ``OSError``/``http.client`` errors never leave
``nodewright_bridge.k8s``: they are wrapped at that edge by :func:`from_http` /
:func:`from_transport_error` with the cause chained (``raise ... from exc``).

The tree::

    NodewrightError                  root of everything nodewright_bridge raises on purpose
     ├── ConfigurationError          no usable kubeconfig / in-cluster config, bad flag value
     ├── LeadershipLostError         a write was attempted after this replica stopped leading
     └── ApiError                    the API server refused or could not be reached
          │                          (``.status``, ``.reason``, ``.message``, ``.retryable``,
          │                          ``.retry_after`` seconds or None)
          ├── TemporaryApiError      retry with back-off; nothing is wrong with the request
          │    ├── ConflictError           409 Conflict: stale resourceVersion -> re-read, retry
          │    ├── TooManyRequestsError    429: throttled; honour ``retry_after``
          │    │    └── DisruptionBudgetError  429 from the Eviction API: a PDB refused
          │    │                               (``.budgets`` names the PDBs from the causes)
          │    ├── ServerError             5xx (500, 502, 503, 504 incl. server timeouts)
          │    └── UnreachableError        no HTTP answer: refused, reset, DNS, TLS, timeout
          ├── ExpiredError           410 Gone: the resourceVersion is too old -> relist
          └── PermanentApiError      retrying the same request cannot succeed
               ├── NotFoundError           404
               ├── AlreadyExistsError      409 AlreadyExists (a create raced another create)
               ├── UnauthorizedError       401
               ├── ForbiddenError          403 (RBAC, or a namespace being terminated)
               ├── InvalidError            422 Invalid: ``.causes`` has the field messages
               └── BadRequestError         400 and every other 4xx

``NotFoundError`` and ``AlreadyExistsError`` are permanent *for that request* but usually not a
failure: callers that delete or create idempotently catch them by name.

Messages are cut to :data:`MAX_MESSAGE` characters. They carry the API server's message, never a
request body, so vars, secrets and kubeconfig contents cannot leak into logs or conditions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# The API server's messages are short; a longer payload is an HTML error page or a whole object.
# 512 keeps a Condition message readable and a log line on one screen.
MAX_MESSAGE = 512


class NodewrightError(Exception):
    """Root of every error ``nodewright_bridge`` raises on purpose."""


class ConfigurationError(NodewrightError):
    """No usable cluster configuration (kubeconfig, context, in-cluster service account)."""


class LeadershipLostError(NodewrightError):
    """A write was attempted after this replica lost (or never had) the leader Lease."""


@dataclass(frozen=True, slots=True)
class Cause:
    """One entry of ``Status.details.causes``: which field and what is wrong with it."""

    field: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class ApiError(NodewrightError):
    """The API server answered with an error status, or could not be reached.

    Attributes:
        status: HTTP status code, 0 when there was no HTTP answer.
        reason: The ``Status.reason`` (``Conflict``, ``NotFound``, ``TooManyRequests``, ...) or
            the HTTP reason phrase.
        message: The API server's message, truncated to :data:`MAX_MESSAGE`.
        causes: ``Status.details.causes``, one per offending field.
        retry_after: Seconds the server asked us to wait (``Retry-After`` header or
            ``details.retryAfterSeconds``), or None.
    """

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        causes: Sequence[Cause] = (),
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = _truncate(message)
        self.causes: tuple[Cause, ...] = tuple(causes)
        self.retry_after = retry_after
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"{self.status} {self.reason}: {self.message}" if self.status else self.message
        if not self.causes:
            return head
        return "\n".join([head, *(f"  {cause}" for cause in self.causes)])


class TemporaryApiError(ApiError):
    """Retrying later, unchanged or after a re-read, can succeed."""

    retryable = True


class ConflictError(TemporaryApiError):
    """409 Conflict: the object changed since we read it (optimistic concurrency)."""


class TooManyRequestsError(TemporaryApiError):
    """429: the API server (or a webhook) throttled us; wait ``retry_after``."""


class DisruptionBudgetError(TooManyRequestsError):
    """429 from the Eviction API: evicting would violate a PodDisruptionBudget.

    Attributes:
        budgets: The causes' messages naming the budget(s), e.g. ``The disruption budget web
            needs 2 healthy pods and has 2 currently``.
    """

    @property
    def budgets(self) -> tuple[str, ...]:
        return tuple(c.message for c in self.causes if c.reason == "DisruptionBudget")


class ServerError(TemporaryApiError):
    """5xx: the API server or etcd failed or timed out."""


class UnreachableError(TemporaryApiError):
    """No HTTP answer at all: connection refused or reset, DNS, TLS handshake, read timeout."""


class ExpiredError(ApiError):
    """410 Gone: a watch or paginated list used a resourceVersion that is too old; relist."""

    retryable = True


class PermanentApiError(ApiError):
    """Retrying the same request cannot succeed; something must change first."""


class NotFoundError(PermanentApiError):
    """404: the object (or its namespace, or the API) does not exist."""


class AlreadyExistsError(PermanentApiError):
    """409 AlreadyExists: a create found an object with that name."""


class UnauthorizedError(PermanentApiError):
    """401: our credentials were rejected."""


class ForbiddenError(PermanentApiError):
    """403: RBAC denies the request, or the namespace is terminating."""


class InvalidError(PermanentApiError):
    """422 Invalid: validation (OpenAPI, CEL, admission) rejected the object; see ``causes``."""


class BadRequestError(PermanentApiError):
    """400 and any 4xx without a class of its own."""


def from_http(
    status_code: int,
    http_reason: str,
    raw_body: str | bytes | None,
    headers: Mapping[str, str] | None,
    *,
    eviction: bool = False,
) -> ApiError:
    """Classify an error response (status, reason phrase, ``Status`` body, headers)."""
    body = _parse_status(raw_body)
    reason = str(body.get("reason") or http_reason or "")
    message = str(body.get("message") or http_reason or f"HTTP {status_code}")
    details = body.get("details")
    details = details if isinstance(details, dict) else {}
    causes = _parse_causes(details.get("causes"))
    retry_after = retry_after_seconds(headers, details.get("retryAfterSeconds"))

    def make(cls: type[ApiError]) -> ApiError:
        return cls(
            message, status=status_code, reason=reason, causes=causes, retry_after=retry_after
        )

    if status_code == 0:
        return make(UnreachableError)  # the client reports TLS failures as status 0
    if status_code == 409:
        return make(AlreadyExistsError if reason == "AlreadyExists" else ConflictError)
    if status_code == 429:
        is_pdb = eviction or any(c.reason == "DisruptionBudget" for c in causes)
        return make(DisruptionBudgetError if is_pdb else TooManyRequestsError)
    by_status: dict[int, type[ApiError]] = {
        400: BadRequestError,
        401: UnauthorizedError,
        403: ForbiddenError,
        404: NotFoundError,
        410: ExpiredError,
        422: InvalidError,
    }
    if status_code in by_status:
        return make(by_status[status_code])
    return make(ServerError if status_code >= 500 else BadRequestError)


def from_transport_error(exc: BaseException) -> UnreachableError:
    """Wrap a transport failure (``OSError``, ``http.client``) where no HTTP status came back."""
    return UnreachableError(f"API server unreachable: {type(exc).__name__}: {exc}")


def from_status_object(status: Mapping[str, object]) -> ApiError:
    """Classify a ``Status`` delivered inside a watch stream (``{"type": "ERROR"}`` events)."""
    code = status.get("code")
    return from_http(
        code if isinstance(code, int) else 500,
        str(status.get("reason") or ""),
        json.dumps(dict(status)),
        None,
    )


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _parse_status(body: str | bytes | None) -> dict[str, object]:
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {"message": body.decode(errors="replace") if isinstance(body, bytes) else body}
    return parsed if isinstance(parsed, dict) else {}


def _parse_causes(raw: object) -> list[Cause]:
    if not isinstance(raw, list):
        return []
    causes = []
    for item in raw:
        if isinstance(item, dict):
            causes.append(
                Cause(
                    field=str(item.get("field") or ""),
                    reason=str(item.get("reason") or ""),
                    message=_truncate(str(item.get("message") or "")),
                )
            )
    return causes


def retry_after_seconds(
    headers: Mapping[str, str] | None, details_seconds: object = None
) -> float | None:
    """The wait an answer asks for: its Retry-After header, else the Status details' seconds."""
    header = None
    if headers is not None:
        header = headers.get("Retry-After") or headers.get("retry-after")
    for candidate in (header, details_seconds):
        if candidate is None:
            continue
        try:
            seconds = float(candidate)  # type: ignore[arg-type]  # str or int off the wire
        except (TypeError, ValueError):
            continue  # an HTTP-date; the API server never sends one
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None
