"""The agent base holds exactly the locked versions: every distribution in its venv is pinned in
requirements.lock at the version installed there, so the same commit gives the same agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from controller_image import engine

from nodewright_bridge.images.lockfile import load_lock, normalize
from nodewright_bridge.sandbox import rootfs
from playbook_adapter import imaging

pytestmark = [pytest.mark.integration, pytest.mark.podman]

LOCK = Path(__file__).resolve().parents[2] / "requirements.lock"
_LIST = (
    "import json, importlib.metadata as m; "
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
)


def test_every_distribution_in_the_agent_base_is_the_locked_version() -> None:
    tree = rootfs.ensure_base_rootfs()
    base_image = f"localhost/nwb-base:{tree.name}"
    imaging.ensure_rootfs_image(engine(), tree, base_image)
    agent = imaging.ensure_agent_base(engine(), base_image)
    python = ["--entrypoint", "/opt/nwb/bin/python", agent.image]
    shown = engine().run(["run", "--rm", "--network=none", *python, "-c", _LIST])
    installed = {normalize(name): version for name, version in json.loads(shown.stdout).items()}
    locked = {normalize(p.name): p.version for p in load_lock(LOCK).pins}
    assert {"ansible-core", "ansible-runner", "pydantic"} <= installed.keys()
    differing = {n: (v, locked.get(n)) for n, v in installed.items() if locked.get(n) != v}
    assert differing == {}, f"agent base vs lock (installed, locked): {differing}"
