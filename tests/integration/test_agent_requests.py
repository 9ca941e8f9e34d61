"""What a role asks for reaches the result, and no handler is lost between attempts.

Real ``nwb-agent`` runs with real ansible-runner, chrooted into an isolated copy-on-write node
root (``roletesting``), as a node pod runs it: reboots and service restarts become requests, a
handler a failed attempt owed runs on the next attempt, a vars change on a role without a config
task file re-runs the role, and a package manager's reboot-required file is a reboot request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nodewright_bridge.sandbox import roletesting

pytestmark = [
    pytest.mark.rootfs,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, chroot and mounts need root"),
]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "roles"
APP_CONFIG = ROOT / "tests" / "e2e" / "roles" / "app-config"
LEDGER = "var/lib/nodewright/handlers/package-test/app-config.json"
DEFER = {"NW_DEFER_RESTARTS": "true"}


def test_a_handler_that_failed_runs_on_the_next_attempt(node_root: tuple[Path, Path]) -> None:
    root, state = node_root
    values = {"app_config_level": "debug", "app_config_handler_fails_once": True}
    first = roletesting.run_stages(
        APP_CONFIG, root, "apply,apply-check", values=values, state=state, capture=True
    )
    assert first.exit_code == 1, first.output
    assert first.result.failure is not None
    assert "failing once" in first.result.failure.message
    assert first.result.pending_handlers == [
        "Apply the app configuration",
        "Restart the app service",
    ]
    assert not (root / "etc/app-config/applied.conf").exists()
    ledger = json.loads((root / LEDGER).read_text())
    assert ledger["pending"] == first.result.pending_handlers

    # The file is already right, so nothing reports changed; the owed handlers run anyway.
    second = roletesting.run_stages(
        APP_CONFIG, root, "apply,apply-check", values=values, state=state, capture=True
    )
    assert second.exit_code == 0, second.output
    assert "notify    again: Apply the app configuration, Restart the app service" in second.output
    assert (root / "etc/app-config/applied.conf").read_text() == "level=debug\n"
    assert second.result.pending_handlers == []
    assert not (root / LEDGER).exists()


def test_an_owed_handler_survives_a_vars_change_that_opens_a_new_attempt(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    armed = {"app_config_level": "debug", "app_config_handler_fails_once": True}
    first = roletesting.run_stages(
        APP_CONFIG, root, "apply,apply-check", values=armed, state=state, capture=True
    )
    assert first.exit_code == 1, first.output
    fixed = {"app_config_level": "warn", "app_config_handler_fails_once": True}
    second = roletesting.run_stages(
        APP_CONFIG, root, "config,config-check", values=fixed, state=state, capture=True,
        extra_env={"NW_RESOURCE_ID": "a-new-change"},
    )  # fmt: skip
    assert second.exit_code == 0, second.output
    assert (root / "etc/app-config/applied.conf").read_text() == "level=warn\n"


def test_restart_handlers_become_requests_when_the_controller_defers_them(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    values = {"app_config_restart_service": True, "app_config_service": "fabric-demo"}
    run = roletesting.run_stages(
        APP_CONFIG, root, "apply,apply-check", values=values, state=state, capture=True,
        extra_env=DEFER,
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert run.result.restart_services == ["fabric-demo"]
    assert not run.result.reboot_requested
    assert any("fabric-demo" in reason for reason in run.result.request_reasons)
    assert (root / "etc/app-config/applied.conf").read_text() == "level=info\n"


def test_a_reboot_handler_is_always_a_request_and_names_its_reason(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    run = roletesting.run_stages(
        EXAMPLES / "grub-params", root, "apply,apply-check", state=state, capture=True,
        values={"grub_params_cmdline": ["mitigations=off"]},
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert run.result.reboot_requested
    assert run.result.request_reasons == ["reboot requested by 'Reboot to apply kernel parameters'"]
    assert run.result.declared_interrupt is not None
    assert run.result.declared_interrupt.type == "reboot"


def test_a_reboot_required_file_left_by_the_run_is_a_reboot_request(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    run = roletesting.run_stages(
        APP_CONFIG, root, "apply,apply-check", values={"app_config_needs_reboot": True},
        state=state, capture=True,
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert run.result.reboot_requested
    assert any("reboot-required" in reason for reason in run.result.request_reasons)

    # Already there before the next run and left alone: not this run's request.
    again = roletesting.run_stages(
        APP_CONFIG, root, "apply,apply-check", values={"app_config_needs_reboot": True},
        state=state, capture=True,
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    assert not again.result.reboot_requested


def test_a_vars_change_on_a_role_without_config_tasks_reruns_the_role(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    dropin = root / "etc/sysctl.d/90-node-tuning.conf"
    role = EXAMPLES / "sysctl-tuning"
    install = roletesting.run_stages(
        role, root, "apply,apply-check,config,config-check", state=state, capture=True,
        values={"sysctl_tuning_settings": {"vm.swappiness": 7}},
    )  # fmt: skip
    assert install.exit_code == 0, install.output
    assert install.output.count("Set kernel parameters") == 1, "the role ran twice in one pod"
    assert "vm.swappiness=7" in dropin.read_text()

    change = roletesting.run_stages(
        role, root, "config,config-check", state=state, capture=True,
        values={"sysctl_tuning_settings": {"vm.swappiness": 11}},
    )  # fmt: skip
    assert change.exit_code == 0, change.output
    assert "vm.swappiness=11" in dropin.read_text()
    assert (state / "proc-sys/vm/swappiness").read_text().strip() == "11"
    config = next(s for s in change.result.stages if s.name == "config")
    assert config.changed >= 1
