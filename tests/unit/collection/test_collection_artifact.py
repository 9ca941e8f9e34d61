"""``ansible-galaxy collection build`` produces an artifact with the modules and without junk.

Junk a developer's tree really holds: ansible-test's ``tests/output`` (sanity results, pylint
stats), ``__pycache__`` from the unit tests, and earlier ``*.tar.gz`` builds. A marker file is put
into ``tests/output`` for the build so the check cannot pass just because the directory is absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
COLLECTION = ROOT / "collections" / "ansible_collections" / "nodewright" / "bridge"
GALAXY = Path(sys.executable).parent / "ansible-galaxy"
MODULES = ("rollout", "rollout_info", "deployment_policy")


def build(dest: Path) -> Path:
    output = COLLECTION / "tests" / "output"
    created_output = not output.exists()
    output.mkdir(parents=True, exist_ok=True)
    marker = output / "junk-from-artifact-test.txt"
    marker.write_text("must not be packaged\n")
    try:
        proc = subprocess.run(
            [str(GALAXY), "collection", "build", "--output-path", str(dest), str(COLLECTION)],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        marker.unlink()
        if created_output:
            output.rmdir()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (artifact,) = dest.glob("nodewright-bridge-*.tar.gz")
    return artifact


def test_the_built_collection_holds_the_modules_and_none_of_the_test_output_or_caches(
    tmp_path: Path,
) -> None:
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    artifact = build(tmp_path)
    assert artifact.name == f"nodewright-bridge-{galaxy['version']}.tar.gz"
    with tarfile.open(artifact) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    for module in MODULES:
        assert f"plugins/modules/{module}.py" in names
    for util in ("client", "rollout"):
        assert f"plugins/module_utils/{util}.py" in names
    assert "plugins/doc_fragments/connection.py" in names
    assert "meta/runtime.yml" in names
    assert "tests/integration/targets/rollout/tasks/main.yml" in names
    junk = sorted(
        n
        for n in names
        if n.startswith("tests/output") or "__pycache__" in n or n.endswith((".pyc", ".tar.gz"))
    )
    assert junk == []
    info = manifest["collection_info"]
    assert (info["namespace"], info["name"], info["version"]) == (
        "nodewright",
        "bridge",
        galaxy["version"],
    )
