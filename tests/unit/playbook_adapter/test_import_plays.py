"""A play's own pre_tasks/tasks/post_tasks/handlers become generated packages, in Ansible's order.

Ansible runs a play as pre_tasks -> flush -> roles -> tasks -> flush -> post_tasks -> flush. The
roles are packages of the CR already; the play's pre_tasks become a package the roles depend on,
its tasks + post_tasks one that depends on the roles, and without roles one package holds all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from lifecycle.validation import load_nodewright, load_policy
from nodewright_bridge.cli import main
from playbook_adapter import importing, introspection, playroles
from playbook_adapter.importing import ImportOptions, import_playbook

HANDLERS = """\
  handlers:
    - name: Reload sysctl
      ansible.builtin.command: sysctl --system
    - name: Reboot node
      ansible.builtin.reboot: {}
"""
FULL_PLAY = (
    """\
- name: Tune nodes
  hosts: nodes
  vars: {motd_text: tuned}
  pre_tasks:
    - name: Write the pre marker
      ansible.builtin.copy: {dest: /etc/pre, content: x}
  roles:
    - tuning
  tasks:
    - name: Write the motd
      ansible.builtin.template: {src: motd.j2, dest: /etc/motd}
      notify: Reload sysctl
  post_tasks:
    - name: Write the post marker
      ansible.builtin.copy: {dest: /etc/post, content: x}
"""
    + HANDLERS
)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def run_import(root: Path, play: str, **options: Any) -> importing.ImportResult:
    write(root, {"site.yml": play, "hosts.ini": "[nodes]\nn1\nn2\n"})
    values: dict[str, Any] = {
        "group_labels": importing.parse_group_labels(["nodes=pool=gpu"]),
        "default_version": "1.0.0",
    }
    return import_playbook(
        root / "site.yml", inventory=root / "hosts.ini", options=ImportOptions(**values | options)
    )


def cr_of(result: importing.ImportResult) -> dict[str, Any]:
    doc = next(d for d in result.documents if d["kind"] == "NodeWright")
    load_nodewright(doc)
    return doc


def role_tasks(result: importing.ImportResult, name: str, file: str = "tasks/main.yml") -> Any:
    role = next(r for r in result.roles if r.name == name)
    return yaml.safe_load(role.files[file])


def test_pre_tasks_run_before_the_roles_and_tasks_post_tasks_after_them(tmp_path: Path) -> None:
    write(tmp_path, {"templates/motd.j2": "{{ motd_text }}\n"})
    result = run_import(tmp_path, FULL_PLAY)
    packages = cr_of(result)["spec"]["packages"]
    assert list(packages) == ["tune-nodes-pre-tasks", "tuning", "tune-nodes-tasks"]
    assert "dependsOn" not in packages["tune-nodes-pre-tasks"]
    assert packages["tuning"]["dependsOn"] == {"tune-nodes-pre-tasks": "1.0.0"}
    assert packages["tune-nodes-tasks"]["dependsOn"] == {"tuning": "1.0.0"}
    for package in packages.values():
        assert package["vars"] == {"motd_text": "tuned"}

    assert [t["name"] for t in role_tasks(result, "tune-nodes-pre-tasks")] == [
        "Write the pre marker"
    ]
    after = role_tasks(result, "tune-nodes-tasks")
    assert [t.get("meta") or t["name"] for t in after] == [
        "Write the motd",
        "flush_handlers",  # Ansible flushes between tasks and post_tasks
        "Write the post marker",
    ]
    handlers = role_tasks(result, "tune-nodes-tasks", "handlers/main.yml")
    assert [h["name"] for h in handlers] == ["Reload sysctl", "Reboot node"]
    assert role_tasks(result, "tune-nodes-pre-tasks", "handlers/main.yml") == handlers
    tasks_role = next(r for r in result.roles if r.name == "tune-nodes-tasks")
    assert tasks_role.files["templates/motd.j2"] == b"{{ motd_text }}\n"


def test_a_play_without_roles_becomes_one_package_with_flushes_between_sections(
    tmp_path: Path,
) -> None:
    play = FULL_PLAY.replace("  roles:\n    - tuning\n", "")
    write(tmp_path, {"templates/motd.j2": "x"})
    result = run_import(tmp_path, play)
    assert list(cr_of(result)["spec"]["packages"]) == ["tune-nodes-tasks"]
    tasks = role_tasks(result, "tune-nodes-tasks")
    assert [t.get("meta") or t["name"] for t in tasks] == [
        "Write the pre marker",
        "flush_handlers",
        "Write the motd",
        "flush_handlers",
        "Write the post marker",
    ]
    assert not any("nothing to package" in str(n) for n in result.notes)


def test_a_reboot_handler_makes_the_generated_package_a_reboot_like_its_manifest(
    tmp_path: Path,
) -> None:
    write(tmp_path, {"templates/motd.j2": "x"})
    result = run_import(tmp_path, FULL_PLAY)
    package = cr_of(result)["spec"]["packages"]["tune-nodes-tasks"]
    assert package["interrupt"]["type"] == "reboot"
    role = next(r for r in result.roles if r.name == "tune-nodes-tasks")
    written = playroles.write_role(role, tmp_path / "out")
    manifest = introspection.inspect_path(written.path).manifest
    assert manifest.interrupt is not None and manifest.interrupt.type == "reboot"
    assert (manifest.name, manifest.version) == ("tune-nodes-tasks", "1.0.0")


def test_files_named_relative_to_the_playbook_are_carried_into_the_role(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "files/limits.conf": "* soft nofile 1\n",
            "common.yml": "- ansible.builtin.template: {src: nested.j2, dest: /etc/n}\n",
            "templates/nested.j2": "n\n",
            "vars/extra.yml": "a: 1\n",
        },
    )
    play = """\
- hosts: nodes
  tasks:
    - ansible.builtin.copy: {src: limits.conf, dest: /etc/security/limits.conf}
    - ansible.builtin.include_tasks: common.yml
    - include_vars: extra.yml
    - ansible.builtin.copy: {src: /srv/abs.conf, dest: /etc/abs.conf}
    - name: From a loop
      ansible.builtin.template: {src: "{{ item }}.j2", dest: /etc/x}
      loop: [a]
    - name: Already on the node
      ansible.builtin.copy: {src: /etc/hosts, dest: /tmp/h, remote_src: true}
    - name: Forgotten
      ansible.builtin.template: src=gone.j2 dest=/etc/gone
"""
    result = run_import(tmp_path, play)
    (role,) = result.roles
    assert role.files["files/limits.conf"] == b"* soft nofile 1\n"
    assert role.files["tasks/common.yml"].startswith(b"- ansible.builtin.template")
    assert role.files["templates/nested.j2"] == b"n\n"  # named by the included file
    assert role.files["vars/extra.yml"] == b"a: 1\n"
    notes = [str(n) for n in result.notes if n.untranslated]
    assert any("'/srv/abs.conf'" in n and "outside the playbook's directory" in n for n in notes)
    assert any("'From a loop'" in n and "templated" in n for n in notes)
    assert any("'Forgotten'" in n and "'gone.j2': not found" in n for n in notes)
    assert not any("Already on the node" in n for n in notes)


def test_unsafe_and_vault_values_are_written_back_with_their_tags(tmp_path: Path) -> None:
    play = """\
- hosts: nodes
  tasks:
    - ansible.builtin.copy:
        dest: /etc/raw
        content: !unsafe "{{ not templated }}"
    - ansible.builtin.debug:
        msg: !vault |
          $ANSIBLE_VAULT;1.1;AES256
          6162
"""
    result = run_import(tmp_path, play)
    text = result.roles[0].files["tasks/main.yml"].decode()
    assert "content: !unsafe '{{ not templated }}'" in text
    assert "msg: !vault |\n      $ANSIBLE_VAULT;1.1;AES256\n      6162" in text
    assert any("vault" in str(n) and "secretVars" in str(n) for n in result.notes)


def test_node_local_tasks_are_kept_and_reported_and_shadowed_vars_are_named(
    tmp_path: Path,
) -> None:
    play = """\
- hosts: nodes
  vars: {phase: start}
  tasks:
    - name: Tell the load balancer
      ansible.builtin.uri: {url: "https://lb/drain"}
      delegate_to: lb1
    - name: Next phase
      ansible.builtin.set_fact: {phase: done}
"""
    result = run_import(tmp_path, play)
    assert "delegate_to" in role_tasks(result, "site-1-tasks")[0], "kept unchanged"
    notes = [str(n) for n in result.notes if n.untranslated]
    assert any("site.yml:4" in n and "delegate_to lb1" in n for n in notes)
    assert any("'Next phase' sets phase" in n and "extra var" in n for n in notes)


def test_a_role_notifying_a_play_handler_is_reported(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "roles/tuning/tasks/main.yml": "- ansible.builtin.command: 'true'\n"
            "  notify: Reload sysctl\n",
            "roles/tuning/meta/main.yml": "galaxy_info: {version: 1.0.0}\n",
        },
    )
    play = "- hosts: nodes\n  roles: [tuning]\n" + HANDLERS
    result = run_import(tmp_path, play)
    assert [r.name for r in result.roles] == [], "no tasks: handlers alone make no package"
    assert any("notifies the play's handler 'Reload sysctl'" in str(n) for n in result.notes)


def test_tags_on_role_entries_and_the_play_follow_the_playbook_command_line(
    tmp_path: Path,
) -> None:
    write(tmp_path, {"templates/motd.j2": "x"})
    play = FULL_PLAY.replace("    - tuning\n", "    - {role: tuning, tags: [sysctl]}\n    - grub\n")
    tagged = cr_of(run_import(tmp_path, play, tags=("sysctl",)))["spec"]["packages"]
    assert tagged["tuning"]["tags"] == ["all", "never"], "the whole role, as Ansible runs it"
    assert tagged["grub"]["tags"] == ["sysctl"], "only grub's own sysctl-tagged tasks"
    assert tagged["tune-nodes-pre-tasks"]["tags"] == ["sysctl"]

    skipped = run_import(tmp_path, play, skip_tags=("sysctl",))
    packages = cr_of(skipped)["spec"]["packages"]
    assert list(packages) == ["tune-nodes-pre-tasks", "grub", "tune-nodes-tasks"]
    assert packages["grub"]["dependsOn"] == {"tune-nodes-pre-tasks": "1.0.0"}
    assert packages["grub"]["skipTags"] == ["sysctl"]
    assert any("skips entirely" in str(n) for n in skipped.notes)

    plain = run_import(tmp_path, play)
    assert "tags" not in cr_of(plain)["spec"]["packages"]["tuning"]
    assert any("select only with ansible-playbook --tags" in str(n) for n in plain.notes)


def test_the_cli_writes_generated_roles_next_to_the_crs_ready_to_build(tmp_path: Path) -> None:
    write(tmp_path, {"site.yml": FULL_PLAY, "hosts.ini": "[nodes]\nn1\n", "templates/motd.j2": ""})
    write(tmp_path, {"roles/tuning/tasks/main.yml": "[]\n"})
    args = ["import", "playbook", str(tmp_path / "site.yml"), "-i", str(tmp_path / "hosts.ini")]
    args += ["--group-label", "nodes=pool=gpu", "--default-version", "1.0.0"]
    piped = CliRunner().invoke(main, args)
    assert piped.exit_code == 2
    assert "pass --output-dir DIR (roles go to DIR/roles) or --roles-dir DIR" in piped.stderr

    out = tmp_path / "out"
    result = CliRunner().invoke(main, [*args, "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    role = out / "roles" / "tune-nodes-tasks"
    manifest = introspection.inspect_path(role)
    assert manifest.from_file and manifest.manifest.stages["apply"].file == "tasks/main.yml"
    assert f"nwb package build {role} --tag localhost/nodewright/tune-nodes-tasks:1.0.0" in (
        result.stderr
    )
    cr = yaml.safe_load((out / "tune-nodes.nodewright.yaml").read_text())
    assert "tune-nodes-tasks" in cr["spec"]["packages"]

    write(tmp_path, {"site.yml": FULL_PLAY.replace("/etc/post", "/etc/post2")})
    again = CliRunner().invoke(main, [*args, "--output-dir", str(out)])
    assert again.exit_code == 0, again.output
    assert "role tune-nodes-tasks changed but kept version 1.0.0" in again.stderr
    assert b"/etc/post2" in (role / "tasks" / "main.yml").read_bytes()


def test_an_existing_role_directory_is_never_overwritten(tmp_path: Path) -> None:
    write(tmp_path, {"mine/site-1-tasks/tasks/main.yml": "- debug: {msg: mine}\n"})
    args = [str(tmp_path / "site.yml"), "-i", str(tmp_path / "hosts.ini")]
    write(tmp_path, {"site.yml": "- hosts: nodes\n  tasks: [{debug: {}}]\n", "hosts.ini": "n1\n"})
    args += ["--group-label", "nodes=pool=gpu", "--roles-dir", str(tmp_path / "mine")]
    result = CliRunner().invoke(main, ["import", "playbook", *args], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "was not generated by `nwb import playbook`" in result.stderr


@pytest.mark.parametrize(
    ("serial", "kind", "params", "budget"),
    [
        ([1, 2, "50%"], "exponential", {"initialBatch": 1, "growthFactor": 2}, {"percent": 50}),
        ([1, 4, 7], "linear", {"initialBatch": 1, "delta": 3}, {"count": 7}),
        (["10%", "10%", 3], "fixed", {"initialBatch": 1}, {"count": 3}),
    ],
)
def test_a_serial_list_becomes_the_policy_strategy_and_its_last_entry_the_budget(
    tmp_path: Path, serial: list[Any], kind: str, params: dict[str, int], budget: dict[str, int]
) -> None:
    write(tmp_path, {"roles/tuning/tasks/main.yml": "[]\n"})
    hosts = "[nodes]\n" + "".join(f"n{i}\n" for i in range(10))
    play = f"- hosts: nodes\n  serial: {serial!r}\n  roles: [tuning]\n"
    write(tmp_path, {"site.yml": play, "hosts.ini": hosts})
    options = ImportOptions(
        group_labels=importing.parse_group_labels(["nodes=pool=gpu"]), default_version="1.0.0"
    )
    result = import_playbook(
        tmp_path / "site.yml", inventory=tmp_path / "hosts.ini", options=options
    )
    policy = next(d for d in result.documents if d["kind"] == "DeploymentPolicy")
    load_policy(policy)
    default = policy["spec"]["default"]
    assert default["budget"] == budget
    (found,) = default["strategy"]
    assert found == kind
    assert {k: default["strategy"][kind][k] for k in params} == params
