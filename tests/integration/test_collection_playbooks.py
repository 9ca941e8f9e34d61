"""The nodewright.bridge collection's integration targets, run by real ``ansible-playbook`` against
the sandbox (collections from this repository, K8S_AUTH_KUBECONFIG = the sandbox's admin).

Each test plays one target role from the collection's ``tests/integration/targets`` (the same
targets ``ansible-test integration`` would run), so the assertions live in the playbooks; the
test checks the play recap and, where it matters, what the output shows a user.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from chart_support import REPO, ensure_crds
from kubernetes import client

from nodewright_bridge.sandbox import Sandbox, binaries

pytestmark = pytest.mark.integration

COLLECTIONS = REPO / "collections"
TARGETS = COLLECTIONS / "ansible_collections/nodewright/bridge/tests/integration/targets"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
GROUP, VERSION = "bridge.nodewright.io", "v1alpha1"


@pytest.fixture(scope="module")
def crds(kube_client: client.ApiClient) -> None:
    ensure_crds(kube_client)


class Play:
    """One ``ansible-playbook`` run of a target role."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.proc = proc
        self.output = proc.stdout + proc.stderr

    def recap(self) -> dict[str, int]:
        match = re.search(r"localhost\s*:\s*((?:\w+=\d+\s*)+)", self.output)
        assert match, self.output
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))}


def play_target(
    target: str, kubeconfig: Path, workdir: Path, extra_vars: dict[str, Any] | None = None
) -> Play:
    workdir.mkdir(parents=True, exist_ok=True)
    playbook = workdir / f"{target}.yml"
    playbook.write_text(
        f"- name: Integration target {target}\n"
        "  hosts: localhost\n"
        "  gather_facts: false\n"
        "  roles:\n"
        f"    - {target}\n"
    )
    variables = {"nwb_prefix": f"it-{uuid.uuid4().hex[:6]}", **(extra_vars or {})}
    (workdir / "vars.json").write_text(json.dumps(variables))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "K8S_AUTH_"))},
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_ROLES_PATH": str(TARGETS),
        "ANSIBLE_HOME": str(workdir / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(workdir / "ansible-tmp"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_PIPELINING": "1",
        "K8S_AUTH_KUBECONFIG": str(kubeconfig),
    }
    env.pop("KUBECONFIG", None)
    argv = [
        str(ANSIBLE_PLAYBOOK),
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        f"@{workdir / 'vars.json'}",
        str(playbook),
    ]
    proc = subprocess.run(argv, env=env, cwd=workdir, capture_output=True, text=True, check=False)
    return Play(proc)


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
