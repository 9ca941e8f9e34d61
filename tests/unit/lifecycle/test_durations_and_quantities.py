"""Go durations and Kubernetes quantities, parsed without the Kubernetes client."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from lifecycle.durations import is_go_duration, parse_duration
from lifecycle.quantities import parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(minutes=90)),
        (".5s", timedelta(milliseconds=500)),
        ("250ms", timedelta(milliseconds=250)),
        ("1m30s500ms", timedelta(seconds=90.5)),
        ("10us", timedelta(microseconds=10)),
        ("10µs", timedelta(microseconds=10)),
        ("0", timedelta(0)),
    ],
)
def test_go_durations_parse(text: str, expected: timedelta) -> None:
    assert is_go_duration(text)
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30", "5 m", "-5m", "+5m", "1d", "m", ".s", "1h 30m", "5M"])
def test_other_strings_are_not_go_durations(text: str) -> None:
    assert not is_go_duration(text)
    with pytest.raises(ValueError, match="is not a Go duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", Decimal(1)),
        ("100m", Decimal("0.1")),
        ("1.5", Decimal("1.5")),
        ("128Mi", Decimal(128 * 1024**2)),
        ("1Gi", Decimal(1024**3)),
        ("1G", Decimal(10**9)),
        ("2k", Decimal(2000)),
        ("1e3", Decimal(1000)),
        ("5E-3", Decimal("0.005")),
        ("10n", Decimal("1e-8")),
    ],
)
def test_kubernetes_quantities_parse_exactly(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "one", "1 Gi", "1GiB", "1KB", "Mi", "1.2.3", "0x10"])
def test_other_strings_are_not_quantities(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(text)
