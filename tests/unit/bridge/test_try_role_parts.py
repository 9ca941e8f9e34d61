"""``nwb try``'s pure parts: the interrupt option, the vars file, the CR it applies."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.spec import NodeWright
from nodewright_bridge.commands.try_role import (
    TryError,
    cr_name,
    parse_interrupt,
    read_vars,
    rollout_object,
)


def test_the_interrupt_option_becomes_the_crs_interrupt() -> None:
    assert parse_interrupt(None) is None  # the role decides
    assert parse_interrupt("reboot") == {"type": "reboot"}
    assert parse_interrupt("service:containerd,kubelet") == {
        "type": "service",
        "services": ["containerd", "kubelet"],
    }
    with pytest.raises(TryError, match="service:UNIT"):
        parse_interrupt("service")
    with pytest.raises(TryError, match="--interrupt"):
        parse_interrupt("shutdown")


def test_the_vars_file_must_be_a_mapping(tmp_path: Path) -> None:
    good = tmp_path / "vars.yml"
    good.write_text("a: 1\nb: [x]\n")
    assert read_vars(good) == {"a": 1, "b": ["x"]}
    assert read_vars(None) == {}
    bad = tmp_path / "list.yml"
    bad.write_text("- a\n")
    with pytest.raises(TryError, match="expected a mapping"):
        read_vars(bad)


def test_the_rollout_is_a_valid_cr_for_the_sandbox_nodes_one_at_a_time() -> None:
    body = rollout_object("sysctl-tuning", "1.3.0", variables={"x": 1}, interrupt={"type": "noop"})
    cr = NodeWright.model_validate(body)
    assert cr.metadata.name == "try-sysctl-tuning"
    assert cr.spec.interruption_budget is not None and cr.spec.interruption_budget.count == 1
    package = cr.spec.packages["sysctl-tuning"]
    assert (package.version, package.vars) == ("1.3.0", {"x": 1})
    assert len(cr_name("p" * 60)) <= 50
