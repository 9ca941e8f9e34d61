"""One test per row of the change-semantics table (README "What a spec change runs"): which spec
change of an installed package opens which cycle, i.e. which task files the next pod runs."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from stage_world import World, make_cr

from lifecycle.stages import config_hash

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
BASE: dict[str, Any] = {"version": "1.0.0", "vars": {"level": 1}}
APPLY_CHAIN = ("apply", "apply-check", "config", "config-check")


def pods_after(change: dict[str, Any], *, before: dict[str, Any] | None = None) -> list[Any]:
    world = World(cr=make_cr({"pkg": {**BASE, **(before or {})}}))
    world.converge()
    world.created.clear()
    world.cr = make_cr({"pkg": {**BASE, **(before or {}), **change}}, generation=2)
    world.converge()
    return [stages for _, stages in world.created_stages()]


@pytest.mark.parametrize(
    ("change", "before", "runs"),
    [
        ({"version": "1.1.0"}, None, [("upgrade", "upgrade-check", "config", "config-check")]),
        ({"version": "0.9.0"}, None, [APPLY_CHAIN]),
        ({"vars": {"level": 2}}, None, [("config", "config-check")]),
        ({"configMap": {"a.conf": "x"}}, None, [("config", "config-check")]),
        ({"secretVars": [{"secretName": "token"}]}, None, [("config", "config-check")]),
        ({"digest": DIGEST_B}, {"digest": DIGEST_A}, [APPLY_CHAIN]),
        ({"digest": DIGEST_A}, None, []),
        ({"image": "registry.local:5000/moved/pkg"}, None, []),
        ({"env": [{"name": "X", "value": "1"}]}, None, []),
        ({"timeouts": {"stage": "5m"}}, None, []),
    ],
    ids=[
        "version-up",
        "version-down",
        "vars",
        "configMap",
        "secretVars",
        "digest-changed",
        "digest-pinned",
        "image-moved",
        "env",
        "timeouts",
    ],
)
def test_a_spec_change_runs_exactly_these_task_files(
    change: dict[str, Any], before: dict[str, Any] | None, runs: list[tuple[str, ...]]
) -> None:
    assert pods_after(change, before=before) == runs


def test_after_a_first_pin_the_next_digest_change_is_seen() -> None:
    world = World(cr=make_cr({"pkg": BASE}))
    world.converge()
    world.cr = make_cr({"pkg": {**BASE, "digest": DIGEST_A}}, generation=2)
    world.converge()
    assert world.state["pkg|1.0.0"].content == DIGEST_A
    world.created.clear()
    world.cr = make_cr({"pkg": {**BASE, "digest": DIGEST_B}}, generation=3)
    world.converge()
    assert [stages for _, stages in world.created_stages()] == [APPLY_CHAIN]


def test_new_data_in_a_secret_vars_secret_is_a_config_change_of_that_package_only() -> None:
    secret = {"secretVars": [{"secretName": "token"}]}
    world = World(cr=make_cr({"pkg": {**BASE, **secret}, "other": {"version": "1.0.0"}}))
    world.secret_data = {"pkg": "digest-1"}
    world.converge()
    world.created.clear()
    world.secret_data = {"pkg": "digest-2"}
    world.converge()
    assert world.created_stages() == [("pkg", ("config", "config-check"))]
    assert world.state["pkg|1.0.0"].changed_keys == ["secretVars"]


def test_the_config_hash_of_a_package_without_secret_vars_is_what_it_always_was() -> None:
    cr = make_cr({"pkg": {"version": "1.0.0", "vars": {"a": 1}, "configMap": {"f": "x"}}})
    payload = json.dumps(
        {"vars": {"a": 1}, "configMap": {"f": "x"}},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert config_hash(cr.spec.packages["pkg"]) == hashlib.sha256(payload.encode()).hexdigest()[:16]
