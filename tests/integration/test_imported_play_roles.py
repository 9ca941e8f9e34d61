"""A role generated from a play's own tasks runs on a node like the play ran them.

``nwb import playbook`` writes the role (tasks, handlers, a template the play names relative to
the playbook) with its manifest; the real agent runs it with real ansible-runner, chrooted into an
isolated node root, with the CR's vars. The handler notified by ``tasks`` runs at the flush
before ``post_tasks``, as in Ansible.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from lifecycle.results import StageStatus
from nodewright_bridge.cli import main
from nodewright_bridge.sandbox import roletesting

pytestmark = [
    pytest.mark.rootfs,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, chroot and mounts need root"),
]

PLAY = """\
- name: Mark nodes
  hosts: nodes
  vars: {motd_owner: platform-team}
  handlers:
    - name: Record the handler
      ansible.builtin.shell: echo handler >> /etc/nw-order
  tasks:
    - name: Write the motd from the playbook's template
      ansible.builtin.template: {src: motd.j2, dest: /etc/motd-nw}
    - name: Record the task
      ansible.builtin.shell: echo task >> /etc/nw-order
      notify: Record the handler
  post_tasks:
    - name: Record the post task
      ansible.builtin.shell: echo post >> /etc/nw-order
"""


def test_the_generated_role_runs_tasks_then_the_flushed_handler_then_post_tasks(
    node_root: tuple[Path, Path], tmp_path: Path
) -> None:
    root, state = node_root
    play_dir = tmp_path / "play"
    (play_dir / "templates").mkdir(parents=True)
    (play_dir / "site.yml").write_text(PLAY, encoding="utf-8")
    (play_dir / "hosts.ini").write_text("[nodes]\nn1\n", encoding="utf-8")
    (play_dir / "templates" / "motd.j2").write_text("owned by {{ motd_owner }}\n")
    out = tmp_path / "out"
    args = ["import", "playbook", str(play_dir / "site.yml"), "-i", str(play_dir / "hosts.ini")]
    args += ["--group-label", "nodes=pool=gpu", "--output-dir", str(out)]
    imported = CliRunner().invoke(main, args)
    assert imported.exit_code == 0, imported.output
    cr = yaml.safe_load((out / "mark-nodes.nodewright.yaml").read_text())
    package = cr["spec"]["packages"]["mark-nodes-tasks"]

    run = roletesting.run_stages(
        out / "roles" / "mark-nodes-tasks",
        root,
        "apply",
        values=package["vars"],
        state=state,
        capture=True,
    )
    assert run.exit_code == 0, run.output
    assert [s.status for s in run.result.stages] == [StageStatus.OK]
    assert (root / "etc/nw-order").read_text().split() == ["task", "handler", "post"]
    assert (root / "etc/motd-nw").read_text() == "owned by platform-team\n"
