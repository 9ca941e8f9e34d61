"""The package manifest: stage map by convention, strict versions, and role introspection."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lifecycle.spec import InterruptType
from playbook_adapter import introspection
from playbook_adapter.errors import ManifestError, RoleLayoutError
from playbook_adapter.manifest import (
    AgentStage,
    EntryKind,
    PackageManifest,
    load_manifest,
    parse_manifest,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "roles"


def make_role(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def stages_of(role: Path) -> dict[str, str]:
    return {str(stage): entry.file for stage, entry in introspection.stage_map(role).items()}


def test_main_yml_is_apply_and_upgrade_and_verify_checks_them(tmp_path: Path) -> None:
    role = make_role(tmp_path, {"tasks/main.yml": "[]", "tasks/verify.yml": "[]"})
    assert stages_of(role) == {
        "apply": "tasks/main.yml",
        "upgrade": "tasks/main.yml",
        "apply-check": "tasks/verify.yml",
        "upgrade-check": "tasks/verify.yml",
        "config-check": "tasks/verify.yml",
    }


def test_every_conventional_task_file_gets_its_stage(tmp_path: Path) -> None:
    role = make_role(
        tmp_path,
        {
            f"tasks/{n}.yml": "[]"
            for n in ("main", "config", "uninstall", "post_interrupt", "check", "uninstall_check")
        },
    )
    stages = stages_of(role)
    assert stages["config"] == "tasks/config.yml"
    assert stages["uninstall"] == "tasks/uninstall.yml"
    assert stages["post-interrupt"] == "tasks/post_interrupt.yml"
    assert stages["post-interrupt-check"] == "tasks/check.yml"
    assert stages["uninstall-check"] == "tasks/uninstall_check.yml"


@pytest.mark.parametrize(
    ("present", "chosen"),
    [
        (["tasks/validate.yml", "tasks/check.yml"], "tasks/check.yml"),
        (["tasks/validate.yml", "tasks/verify.yml"], "tasks/verify.yml"),
        (["tasks/validate.yml", "molecule/default/verify.yml"], "tasks/validate.yml"),
    ],
)
def test_the_first_check_file_by_precedence_wins(
    tmp_path: Path, present: list[str], chosen: str
) -> None:
    role = make_role(tmp_path, {"tasks/main.yml": "[]", **{p: "[]" for p in present}})
    assert stages_of(role)["apply-check"] == chosen


def test_molecule_verify_is_the_check_as_a_playbook(tmp_path: Path) -> None:
    role = make_role(tmp_path, {"tasks/main.yml": "[]", "molecule/default/verify.yml": "[]"})
    entry = introspection.stage_map(role)[AgentStage.APPLY_CHECK]
    assert (entry.file, entry.kind) == ("molecule/default/verify.yml", EntryKind.PLAYBOOK)


@pytest.mark.parametrize("version", ["1.0", "v1.0.0", "1.0.0.0", "01.0.0", "latest"])
def test_a_version_that_is_not_strict_semver_is_rejected(version: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(f"name: demo\nversion: '{version}'\n")
    assert any(
        p.endswith("version: Value error, must be strict semver x.y.z (no 'v' prefix)")
        for p in caught.value.problems
    )


def test_a_manifest_round_trips_through_yaml(tmp_path: Path) -> None:
    manifest = introspection.introspect_role(EXAMPLES / "security-agent")
    (tmp_path / "nodewright-package.yaml").write_text(manifest.to_yaml())
    assert load_manifest(tmp_path) == manifest


def test_an_unknown_manifest_key_is_an_error_with_its_path() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest("name: demo\nversion: 1.0.0\nstages: {aply: tasks/main.yml}\n")
    assert any("stages.aply" in p for p in caught.value.problems)


def test_a_task_file_outside_the_role_is_rejected() -> None:
    with pytest.raises(ManifestError):
        parse_manifest("name: demo\nversion: 1.0.0\nstages: {apply: ../../etc/passwd}\n")


def test_name_version_deps_interrupt_and_collections_come_from_the_role(tmp_path: Path) -> None:
    role = make_role(
        tmp_path / "my_role",
        {
            "meta/main.yml": "galaxy_info: {role_name: Disk_Tuning, version: 3.1.4}\n"
            "dependencies: [common, {role: base.users}]\n",
            "tasks/main.yml": "- community.general.ini_file: {path: /x}\n"
            "- block:\n  - ansible.posix.sysctl: {name: a, value: 1}\n"
            "- ansible.builtin.debug: {msg: x}\n",
            "handlers/main.yml": "- name: Reboot the node\n  ansible.builtin.reboot: {}\n",
        },
    )
    manifest = introspection.introspect_role(role)
    assert (manifest.name, manifest.version) == ("disk-tuning", "3.1.4")
    assert manifest.role_dependencies == ["common", "base.users"]
    assert manifest.interrupt is not None and manifest.interrupt.type is InterruptType.REBOOT
    assert [c.name for c in manifest.collections] == ["ansible.posix", "community.general"]
    assert all(c.version for c in manifest.collections), "bundled at the installed version"


def test_a_restart_handler_makes_a_service_interrupt(tmp_path: Path) -> None:
    role = make_role(
        tmp_path,
        {
            "meta/main.yml": "galaxy_info: {version: 1.0.0}\n",
            "tasks/main.yml": "[]",
            "handlers/main.yml": "- name: restart it\n"
            "  ansible.builtin.systemd: {name: chronyd, state: restarted}\n",
        },
    )
    interrupt = introspection.introspect_role(role).interrupt
    assert interrupt is not None
    assert (interrupt.type, interrupt.services) == (InterruptType.SERVICE, ["chronyd"])


def test_a_role_inside_a_collection_takes_its_fqcn_and_version_from_galaxy_yml(
    tmp_path: Path,
) -> None:
    coll = tmp_path / "ansible_collections" / "acme" / "nodes"
    make_role(coll, {"galaxy.yml": "namespace: acme\nname: nodes\nversion: 4.2.0\n"})
    role = make_role(coll / "roles" / "ntp", {"tasks/main.yml": "- acme.nodes.chrony: {}\n"})
    manifest = introspection.introspect_role(role)
    assert (manifest.name, manifest.version, manifest.role_fqcn) == (
        "ntp",
        "4.2.0",
        "acme.nodes.ntp",
    )
    assert manifest.collections == [], "the role's own collection is not a separate bundle"


def test_the_version_falls_back_to_the_newest_git_tag(tmp_path: Path) -> None:
    role = make_role(tmp_path, {"tasks/main.yml": "[]"})
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    subprocess.run([*git, "tag", "v0.9.1"], check=True)
    assert introspection.introspect_role(role).version == "0.9.1"


def test_an_explicit_version_wins_and_no_version_at_all_is_an_error(tmp_path: Path) -> None:
    role = make_role(tmp_path, {"tasks/main.yml": "[]"})
    assert introspection.introspect_role(role, version="2.0.0").version == "2.0.0"
    with pytest.raises(RoleLayoutError, match="pass --version"):
        introspection.introspect_role(role)


def test_required_options_with_a_role_default_are_not_required_from_the_cr(tmp_path: Path) -> None:
    role = make_role(
        tmp_path,
        {
            "meta/main.yml": "galaxy_info: {version: 1.0.0}\n",
            "defaults/main.yml": "a: 1\n",
            "meta/argument_specs.yml": "argument_specs: {main: {options: "
            "{a: {type: int, required: true}, b: {type: int, required: true}}}}\n",
            "tasks/main.yml": "[]",
        },
    )
    assert introspection.introspect_role(role).argument_schema["required"] == ["b"]


@pytest.mark.parametrize(
    "name", ["sysctl-tuning", "grub-params", "kmod-blacklist", "security-agent"]
)
def test_each_example_role_becomes_a_valid_package(name: str) -> None:
    manifest = introspection.introspect_role(EXAMPLES / name)
    assert isinstance(manifest, PackageManifest)
    assert {
        AgentStage.APPLY,
        AgentStage.APPLY_CHECK,
        AgentStage.UNINSTALL,
        AgentStage.UNINSTALL_CHECK,
    } <= set(manifest.stages)
    assert manifest.argument_schema["properties"]
