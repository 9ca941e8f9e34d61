"""Hashes kept by spec-object identity (``lifecycle.memo``) answer exactly what computing them
afresh answers: a new CR generation's package, equal or not, is never given an old answer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lifecycle import memo, recovery, stage_identities
from lifecycle.spec import Package

VARS = st.dictionaries(st.sampled_from(["a", "b", "sysctl"]), st.integers(0, 3), max_size=3)


def package(vars_: dict[str, int], version: str = "1.0.0") -> Package:
    return Package.model_validate({"version": version, "image": "r/p", "vars": vars_})


@given(first=VARS, second=VARS, secret=st.sampled_from(["", "d1", "d2"]))
def test_kept_hashes_equal_fresh_ones_for_every_package_object(
    first: dict[str, int], second: dict[str, int], secret: str
) -> None:
    one, other = package(first), package(second)
    for each, vars_ in ((one, first), (other, second), (one, first)):  # asked again: kept
        fresh = package(vars_)  # a new object: computed afresh
        assert recovery.fingerprint(each, secret) == recovery.fingerprint(fresh, secret)
        assert stage_identities.config_hash(each, secret) == stage_identities.config_hash(
            fresh, secret
        )
    assert (recovery.fingerprint(one, secret) == recovery.fingerprint(other, secret)) == (
        first == second
    )
    assert (recovery.fingerprint(one, "") == recovery.fingerprint(one, "other")) is False


def test_an_equal_but_new_object_is_computed_again_and_the_cache_stays_bounded() -> None:
    calls: list[object] = []

    @memo.by_identity
    def length(obj: list[int], text: str) -> str:
        calls.append(obj)
        return f"{len(obj)}{text}"

    kept = [1, 2]
    assert length(kept, "x") == "2x"
    assert length(kept, "x") == "2x"
    assert len(calls) == 1, "the same object was computed twice"
    assert length([1, 2], "x") == "2x"
    assert len(calls) == 2, "an equal but new object was given the kept answer"
    assert length(kept, "y") == "2y"
    objects = [[i] for i in range(memo.LIMIT + 10)]
    for each in objects:
        length(each, "")
    assert length(kept, "x") == "2x"  # emptied when full: computed again, still right
    assert len(calls) == 3 + len(objects) + 1
