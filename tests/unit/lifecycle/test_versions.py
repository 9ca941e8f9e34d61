"""Strict semver parsing and the install / upgrade / downgrade decision."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle import versions
from lifecycle.errors import InvalidVersionError
from lifecycle.versions import VersionChange


@pytest.mark.parametrize(
    "text", ["1.2.3", "0.0.0", "10.20.30", "1.0.0-rc.1", "1.0.0+b.5", "1.0.0-alpha-1.x+sha.5114f85"]
)
def test_strict_semver_is_accepted(text: str) -> None:
    assert versions.is_strict_semver(text)
    assert str(versions.parse(text)) == text


@pytest.mark.parametrize(
    "text", ["1", "1.2", "v1.2.3", "01.2.3", "1.2.3-01", " 1.2.3", "1.2.3.4", "", "latest"]
)
def test_anything_else_is_rejected(text: str) -> None:
    assert not versions.is_strict_semver(text)
    with pytest.raises(InvalidVersionError, match="is not strict semver"):
        versions.parse(text)


@pytest.mark.parametrize(
    ("installed", "wanted", "expected"),
    [
        (None, "1.0.0", VersionChange.INSTALL),
        ("1.0.0", "1.0.1", VersionChange.UPGRADE),
        ("1.9.0", "1.10.0", VersionChange.UPGRADE),  # numeric, not lexical
        ("2.0.0", "1.99.99", VersionChange.DOWNGRADE),
        ("1.0.0", "1.0.0", VersionChange.SAME),
        ("1.0.0-rc.1", "1.0.0", VersionChange.UPGRADE),  # pre-release sorts before the release
        ("1.0.0", "1.0.0-rc.1", VersionChange.DOWNGRADE),
        ("1.0.0-alpha.9", "1.0.0-alpha.10", VersionChange.UPGRADE),
        ("1.0.0-alpha", "1.0.0-alpha.1", VersionChange.UPGRADE),
        ("1.0.0-beta", "1.0.0-alpha", VersionChange.DOWNGRADE),
        ("1.0.0+build.1", "1.0.0+build.2", VersionChange.SAME),  # build metadata has no order
    ],
)
def test_direction(installed: str | None, wanted: str, expected: VersionChange) -> None:
    assert versions.direction(installed, wanted) is expected


def test_direction_rejects_a_non_semver_version() -> None:
    with pytest.raises(InvalidVersionError):
        versions.direction("1.0", "1.0.0")
    with pytest.raises(InvalidVersionError):
        versions.direction(None, "latest")


triples = st.tuples(*(st.integers(0, 30) for _ in range(3))).map(lambda t: f"{t[0]}.{t[1]}.{t[2]}")


@given(triples, triples)
def test_direction_is_antisymmetric(a: str, b: str) -> None:
    forward, backward = versions.direction(a, b), versions.direction(b, a)
    opposite = {
        VersionChange.UPGRADE: VersionChange.DOWNGRADE,
        VersionChange.DOWNGRADE: VersionChange.UPGRADE,
        VersionChange.SAME: VersionChange.SAME,
    }
    assert backward is opposite[forward]
    assert (forward is VersionChange.SAME) == (a == b)
