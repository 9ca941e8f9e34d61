"""Package image pieces that need no container engine: the package tree, labels, Containerfiles,
image references and the agent's requirement list."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from playbook_adapter import imaging
from playbook_adapter.errors import BadInputError
from playbook_adapter.manifest import MANIFEST_FILE, PackageManifest, load_manifest


def _role(root: Path, name: str, deps: list[str] | None = None) -> Path:
    role = root / name
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text("- ansible.builtin.debug: {msg: hi}\n")
    (role / "meta").mkdir()
    (role / "meta" / "main.yml").write_text(yaml.safe_dump({"dependencies": deps or []}))
    (role / ".git").mkdir()
    return role


def _manifest(**extra: object) -> PackageManifest:
    data = {"name": "tuning", "version": "1.2.3", "stages": {"apply": "tasks/main.yml"}}
    data.update(extra)
    return PackageManifest.model_validate(data)


def test_the_package_tree_has_the_manifest_role_role_deps_and_listed_collections(
    tmp_path: Path,
) -> None:
    roles = tmp_path / "roles"
    role = _role(roles, "tuning", deps=["common", {"role": "base"}])  # type: ignore[list-item]
    _role(roles, "common", deps=["base"])
    _role(roles, "base")
    (role / MANIFEST_FILE).write_text("stale copy")
    manifest = _manifest(collections=[{"name": "ansible.posix"}])

    tree = imaging.assemble_package(role, manifest, tmp_path / "package")

    assert tree.roles == ["tuning", "common", "base"]
    assert tree.collections == ["ansible.posix", "community.general"]
    package = tmp_path / "package"
    assert (package / "roles/tuning/tasks/main.yml").is_file()
    assert not (package / "roles/tuning/.git").exists()
    assert not (package / "roles/tuning" / MANIFEST_FILE).exists()
    assert (package / "collections/ansible_collections/ansible/posix/plugins/modules").is_dir()
    assert not (package / "collections/ansible_collections/ansible/posix/tests").exists()
    in_image = load_manifest(package)
    assert in_image.role == "roles/tuning"
    assert in_image.version == "1.2.3"


def test_a_collection_that_is_not_installed_is_bad_input_naming_it(tmp_path: Path) -> None:
    role = _role(tmp_path / "roles", "tuning", deps=["missing_role"])
    manifest = _manifest(collections=[{"name": "nosuch.collection"}])
    with pytest.raises(BadInputError) as caught:
        imaging.assemble_package(role, manifest, tmp_path / "package")
    problems = "\n".join(caught.value.problems)
    assert "nosuch.collection is not installed" in problems
    assert "role 'missing_role' not found" in problems


def test_labels_are_the_oci_ones_plus_package_version_and_stages() -> None:
    manifest = _manifest(stages={"apply": "tasks/main.yml", "apply-check": "tasks/main.yml"})
    labels = imaging.package_labels(
        manifest, created=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), source="https://git/x"
    )
    assert labels["org.opencontainers.image.created"] == "2026-01-02T03:04:05+00:00"
    assert labels["org.opencontainers.image.source"] == "https://git/x"
    assert labels["bridge.nodewright.io/stages"] == "apply,apply-check"
    containerfile = imaging.package_containerfile(labels)
    assert containerfile.startswith("ARG AGENT_BASE\nFROM ${AGENT_BASE}\n")
    assert '"bridge.nodewright.io/package"="tuning"' in containerfile
    assert "COPY package/ /nodewright/package/" in containerfile


def test_the_agent_base_installs_offline_and_runs_nwb_agent() -> None:
    text = imaging.agent_base_containerfile(["ansible-core==2.19.14"], "abc")
    assert "ARG BASE_IMAGE=docker.io/library/python:3.11-slim" in text
    assert "--no-index" in text and "'ansible-core==2.19.14'" in text
    assert 'ENTRYPOINT ["nwb-agent"]' in text
    assert "NW_PACKAGE_DIR=/nodewright/package" in text


def test_the_agent_requirements_leave_out_the_controller_only_dependencies() -> None:
    names = {r.split("==")[0].lower() for r in imaging.agent_requirements()}
    assert {"ansible-core", "ansible-runner", "pydantic", "semver"} <= names
    assert not names & {"kubernetes", "prometheus-client", "watchfiles", "pytest"}


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        (None, "localhost/nodewright/tuning:1.2.3"),
        ("127.0.0.1:5000/pkgs/tuning", "127.0.0.1:5000/pkgs/tuning:1.2.3"),
        ("registry.example:443/tuning:dev", "registry.example:443/tuning:dev"),
    ],
)
def test_the_image_tag_defaults_to_the_package_version(tag: str | None, expected: str) -> None:
    assert imaging.package_reference(_manifest(), tag) == expected
