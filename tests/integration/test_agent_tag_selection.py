"""A package's ``tags``/``skipTags`` select the role's tasks through the agent's include_role.

Real ansible-runner, chrooted into an isolated copy-on-write node root, exactly as a node pod runs
(``NW_TAGS``/``NW_SKIP_TAGS`` are what podspec sets). Tags on an include_role task do not reach
the included tasks, so a naive ``--tags`` run would skip the include and with it the whole role.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lifecycle.results import StageStatus
from nodewright_bridge.sandbox import roletesting

pytestmark = [
    pytest.mark.rootfs,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, chroot and mounts need root"),
]

TASKS = """\
- name: Tagged sysctl
  ansible.builtin.copy: {dest: /etc/nw-sysctl, content: "x\\n"}
  tags: [sysctl]
- name: Untagged
  ansible.builtin.copy: {dest: /etc/nw-untagged, content: "x\\n"}
- name: Tagged sysctl and slow
  ansible.builtin.copy: {dest: /etc/nw-slow, content: "x\\n"}
  tags: [sysctl, slow]
"""
MARKERS = ("nw-sysctl", "nw-untagged", "nw-slow")


@pytest.fixture
def role(tmp_path: Path) -> Path:
    role = tmp_path / "tagged-role"
    (role / "tasks").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "tasks" / "main.yml").write_text(TASKS, encoding="utf-8")
    (role / "meta" / "main.yml").write_text("galaxy_info: {version: 1.0.0}\n", encoding="utf-8")
    return role


def written(root: Path) -> set[str]:
    return {name for name in MARKERS if (root / "etc" / name).exists()}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({"NW_TAGS": "sysctl"}, {"nw-sysctl", "nw-slow"}, id="tags"),
        pytest.param(
            {"NW_TAGS": "sysctl", "NW_SKIP_TAGS": "slow"}, {"nw-sysctl"}, id="tags-and-skip"
        ),
        pytest.param({"NW_SKIP_TAGS": "slow"}, {"nw-sysctl", "nw-untagged"}, id="skip-only"),
        pytest.param(
            {"NW_TAGS": "sysctl", "NW_SKIP_TAGS": "always"},
            {"nw-sysctl", "nw-slow"},
            id="skip-always",
        ),
        pytest.param({}, set(MARKERS), id="no-tags"),
    ],
)
def test_tags_run_the_tagged_tasks_and_skip_tags_skip_theirs(
    node_root: tuple[Path, Path], role: Path, env: dict[str, str], expected: set[str]
) -> None:
    root, state = node_root
    run = roletesting.run_stages(role, root, "apply", state=state, capture=True, extra_env=env)
    assert run.exit_code == 0, run.output
    assert written(root) == expected, run.output
    (stage,) = run.result.stages
    assert stage.status is StageStatus.OK
    assert stage.changed == len(expected)
