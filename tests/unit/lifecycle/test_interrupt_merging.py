"""Interrupt choice per cycle and merging of interrupts due together."""

from __future__ import annotations

from stage_world import make_cr

from lifecycle.interrupts import (
    ALL_KEYS,
    changed_keys,
    cycle_interrupts,
    matched_config_interrupts,
    merge,
)
from lifecycle.spec import Interrupt, InterruptType

T = InterruptType


def irq(kind: str, *services: str) -> Interrupt:
    return Interrupt(type=InterruptType(kind), services=list(services))


def test_reboot_beats_every_other_interrupt_and_its_package_owns_it() -> None:
    merged = merge(
        {"aa": [irq("service", "x")], "zz": [irq("reboot")], "mm": [irq("restartAllServices")]}
    )
    assert merged is not None and (merged.type, merged.owner, merged.services) == (
        T.REBOOT,
        "zz",
        (),
    )


def test_restart_all_services_beats_service_which_beats_noop() -> None:
    assert merge({"aa": [irq("noop")], "bb": [irq("service", "x")]}).type is T.SERVICE  # type: ignore[union-attr]
    assert merge({"aa": [irq("service", "x")], "bb": [irq("restartAllServices")]}).owner == "bb"  # type: ignore[union-attr]


def test_service_interrupts_merge_into_the_sorted_union_owned_by_the_first_name() -> None:
    merged = merge(
        {"zeb": [irq("service", "cron")], "dax": [irq("service", "foobar", "containerd")]}
    )
    assert merged is not None
    assert (merged.owner, merged.services) == ("dax", ("containerd", "cron", "foobar"))


def test_nothing_to_merge_is_none() -> None:
    assert merge({"aa": []}) is None


def test_an_install_cycle_uses_the_package_interrupt() -> None:
    pkg = make_cr({"cfg": {"version": "1.0.0", "interrupt": {"type": "reboot"}}}).spec.packages[
        "cfg"
    ]
    assert cycle_interrupts(pkg, []) == [irq("reboot")]


def test_a_config_cycle_uses_only_matching_config_interrupts_by_glob() -> None:
    pkg = make_cr(
        {
            "cfg": {
                "version": "1.0.0",
                "interrupt": {"type": "reboot"},
                "vars": {"sysctl_a": 1, "grub_cmdline": "x", "motd": "hi"},
                "configInterrupts": {
                    "sysctl_*": {"type": "service", "services": ["procps"]},
                    "grub_*": {"type": "reboot"},
                },
            }
        }
    ).spec.packages["cfg"]
    assert cycle_interrupts(pkg, ["sysctl_a"]) == [irq("service", "procps")]
    assert cycle_interrupts(pkg, ["motd"]) == []
    assert {i.type for i in cycle_interrupts(pkg, ["sysctl_a", "grub_cmdline"])} == {
        T.SERVICE,
        T.REBOOT,
    }
    assert len(matched_config_interrupts(pkg, [ALL_KEYS])) == 2


def test_changed_keys_lists_added_removed_and_modified_keys_sorted() -> None:
    assert changed_keys({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "9", "d": "4"}) == [
        "b",
        "c",
        "d",
    ]
