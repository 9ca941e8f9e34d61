"""Run the nodewright.bridge collection's integration targets with real ``ansible-playbook``.

The collection comes from this repository (ANSIBLE_COLLECTIONS_PATH), the target roles from its
``tests/integration/targets`` (the same targets ``ansible-test integration`` would run), the
cluster from K8S_AUTH_KUBECONFIG - as a user's playbook would reach it.
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

from chart_support import REPO

COLLECTIONS = REPO / "collections"
TARGETS = COLLECTIONS / "ansible_collections/nodewright/bridge/tests/integration/targets"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


class Play:
    """One finished ``ansible-playbook`` run of a target role."""

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
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "K8S_"))}
    inherited.pop("KUBECONFIG", None)
    env = {
        **inherited,
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
    play = Play(proc)
    (workdir / "ansible-playbook.log").write_text(play.output)  # kept for debugging
    return play
