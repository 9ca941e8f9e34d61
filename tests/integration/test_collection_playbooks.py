"""The nodewright.bridge collection's integration targets, run by real ``ansible-playbook`` against
the sandbox (collections from this repository, K8S_AUTH_KUBECONFIG = the sandbox's admin).

Each test plays one target role from the collection's ``tests/integration/targets`` (the same
targets ``ansible-test integration`` would run), so the assertions live in the playbooks; the
test checks the play recap and, where it matters, what the output shows a user.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chart_support import ensure_crds
from kubernetes import client
from playbook_support import play_target

from nodewright_bridge.sandbox import Sandbox, binaries

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def crds(kube_client: client.ApiClient) -> None:
    ensure_crds(kube_client)


def test_deployment_policy_target_creates_updates_is_idempotent_and_deletes(
    crds: None, sandbox: Sandbox, tmp_path: Path
) -> None:
    play = play_target("deployment_policy", sandbox.kubeconfig, tmp_path)
    assert play.proc.returncode == 0, play.output
    recap = play.recap()
    assert recap["failed"] == 0
    assert recap["ignored"] == 1  # the invalid policy, asserted on inside the target
    assert recap["changed"] >= 4


def test_rollout_target_check_mode_validation_errors_info_pause_and_delete(
    crds: None, sandbox: Sandbox, tmp_path: Path
) -> None:
    kubectl = binaries.find("kubectl")
    assert kubectl is not None, "kubectl is part of the sandbox binaries (make setup)"
    play = play_target("rollout", sandbox.kubeconfig, tmp_path, {"nwb_kubectl": str(kubectl.path)})
    assert play.proc.returncode == 0, play.output
    recap = play.recap()
    assert recap["failed"] == 0
    assert recap["ignored"] == 2  # the two rejected bad versions, asserted on inside the target
