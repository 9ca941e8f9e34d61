"""An API server's error answer -> our error tree, by retry semantics."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from nodewright_bridge import errors


@dataclass
class ErrorAnswer:
    """What the transport hands over of an error answer: status, reason, body, headers."""

    status: int
    reason: str
    body: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


def classify(answer: ErrorAnswer, *, eviction: bool = False) -> errors.ApiError:
    return errors.from_http(
        answer.status, answer.reason, answer.body, answer.headers, eviction=eviction
    )


def error_answer(
    status: int, reason: str = "", message: str = "", **details: object
) -> ErrorAnswer:
    exc = ErrorAnswer(status=status, reason=reason)
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": status,
    }
    if details:
        body["details"] = details
    exc.body = json.dumps(body)
    exc.headers = {}
    return exc


@pytest.mark.parametrize(
    ("status", "reason", "expected", "retryable"),
    [
        (409, "Conflict", errors.ConflictError, True),
        (409, "AlreadyExists", errors.AlreadyExistsError, False),
        (404, "NotFound", errors.NotFoundError, False),
        (403, "Forbidden", errors.ForbiddenError, False),
        (401, "Unauthorized", errors.UnauthorizedError, False),
        (422, "Invalid", errors.InvalidError, False),
        (400, "BadRequest", errors.BadRequestError, False),
        (415, "UnsupportedMediaType", errors.BadRequestError, False),
        (410, "Expired", errors.ExpiredError, True),
        (429, "TooManyRequests", errors.TooManyRequestsError, True),
        (500, "InternalError", errors.ServerError, True),
        (504, "Timeout", errors.ServerError, True),
        (0, "", errors.UnreachableError, True),
    ],
)
def test_each_status_maps_to_its_retry_class(
    status: int, reason: str, expected: type[errors.ApiError], retryable: bool
) -> None:
    error = classify(error_answer(status, reason, "boom"))
    assert type(error) is expected
    assert error.retryable is retryable
    assert error.status == status
    assert isinstance(error, errors.NodewrightError)


def test_invalid_carries_the_api_servers_field_messages() -> None:
    exc = error_answer(
        422,
        "Invalid",
        'NodeWright.bridge.nodewright.io "x" is invalid',
        causes=[
            {
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: "1.x": must be semver',
                "field": "spec.packages.tuning.version",
            }
        ],
    )
    error = classify(exc)
    assert isinstance(error, errors.InvalidError)
    assert [c.field for c in error.causes] == ["spec.packages.tuning.version"]
    assert "spec.packages.tuning.version: Invalid value" in str(error)


def test_an_eviction_refused_by_a_pdb_names_the_budget_and_the_retry_delay() -> None:
    exc = error_answer(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        causes=[
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
            }
        ],
        retryAfterSeconds=10,
    )
    error = classify(exc)
    assert isinstance(error, errors.DisruptionBudgetError)
    assert isinstance(error, errors.TemporaryApiError)
    assert error.retry_after == 10
    assert error.budgets == ("The disruption budget web needs 2 healthy pods and has 2 currently",)


def test_a_429_on_the_eviction_subresource_is_a_pdb_refusal_even_without_causes() -> None:
    error = classify(error_answer(429, "TooManyRequests", "x"), eviction=True)
    assert isinstance(error, errors.DisruptionBudgetError)


def test_a_plain_429_is_throttling_and_reads_the_retry_after_header() -> None:
    exc = error_answer(429, "TooManyRequests", "slow down")
    exc.headers = {"Retry-After": "3"}
    error = classify(exc)
    assert type(error) is errors.TooManyRequestsError
    assert error.retry_after == 3.0


def test_a_non_json_body_becomes_the_message_truncated() -> None:
    exc = ErrorAnswer(status=502, reason="Bad Gateway")
    exc.body = "<html>" + "x" * 5000
    error = classify(exc)
    assert isinstance(error, errors.ServerError)
    assert error.message.startswith("<html>")
    assert len(error.message) == errors.MAX_MESSAGE


def test_a_missing_body_falls_back_to_the_http_reason() -> None:
    exc = ErrorAnswer(status=404, reason="Not Found")
    error = classify(exc)
    assert isinstance(error, errors.NotFoundError)
    assert error.message == "Not Found"


def test_a_watch_error_event_status_is_classified_like_a_response() -> None:
    status = {
        "kind": "Status",
        "code": 410,
        "reason": "Expired",
        "message": "too old resource version: 1 (2000)",
    }
    error = errors.from_status_object(status)
    assert isinstance(error, errors.ExpiredError)
    assert "too old resource version" in error.message


def test_a_transport_failure_is_unreachable_and_retryable() -> None:
    error = errors.from_transport_error(ConnectionRefusedError(111, "Connection refused"))
    assert isinstance(error, errors.UnreachableError)
    assert error.retryable
    assert "ConnectionRefusedError" in str(error)
