"""``nwb package init`` bundles the collections a role's lookups, loops and Jinja plugins need."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from playbook_adapter import introspection


def make_role(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"meta/main.yml": "galaxy_info: {version: 1.0.0}\n", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def bundled(role: Path) -> dict[str, str]:
    manifest = introspection.introspect_role(role)
    return {c.name: c.version for c in manifest.collections}


def test_a_with_lookup_loop_bundles_the_lookups_collection_not_a_with_collection(
    tmp_path: Path,
) -> None:
    role = make_role(
        tmp_path / "r",
        {
            "tasks/main.yml": "- ansible.builtin.debug: {msg: '{{ item }}'}\n"
            "  with_community.general.flattened: [[1], [2]]\n"
            "- ansible.builtin.debug: {msg: '{{ item }}'}\n"
            "  with_items: [1]\n"
        },
    )
    found = bundled(role)
    assert list(found) == ["community.general"]
    assert found["community.general"], "bundled at the version installed here"


def test_lookup_query_and_q_inside_task_values_bundle_their_collections(tmp_path: Path) -> None:
    role = make_role(
        tmp_path / "r",
        {
            "tasks/main.yml": "- name: Fetch the enrolment token\n"
            "  ansible.builtin.copy:\n"
            "    dest: /etc/token\n"
            "    content: \"{{ lookup('community.hashi_vault.vault_read', 'kv/x').data }}\"\n"
            "- ansible.builtin.debug: {msg: '{{ item }}'}\n"
            "  loop: \"{{ query( 'community.general.dig', 'example.org' ) }}\"\n"
            "- block:\n"
            "    - ansible.builtin.debug: {msg: x}\n"
            "      when: q(\"community.crypto.gpg_fingerprint\", '/k') | length > 0\n",
            "handlers/main.yml": "- name: note\n"
            "  ansible.builtin.debug:\n"
            "    msg: \"{{ lookup('ansible.builtin.env', 'HOME') }}\"\n",
        },
    )
    assert set(bundled(role)) == {
        "community.hashi_vault",
        "community.general",
        "community.crypto",
    }


def test_filters_and_tests_in_defaults_vars_and_templates_bundle_their_collections(
    tmp_path: Path,
) -> None:
    role = make_role(
        tmp_path / "r",
        {
            "tasks/main.yml": "- name: This is ansible.posix.sysctl based, says the name only\n"
            "  ansible.builtin.template: {src: x.j2, dest: /x}\n",
            "defaults/main.yml": "servers: \"{{ raw | community.general.json_query('a') }}\"\n",
            "vars/main.yml": 'ok: "{{ path is not ansible.posix.mount_point }}"\n',
            "templates/x.j2": "{% for k in keys | community.crypto.openssl_csr_info %}{{ k }}"
            "{% endfor %}\n",
        },
    )
    assert set(bundled(role)) == {"community.general", "ansible.posix", "community.crypto"}


def test_a_lookup_from_a_collection_not_installed_is_named_right_in_the_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    role = make_role(
        tmp_path / "r",
        {
            "tasks/main.yml": "- ansible.builtin.debug: {msg: '{{ item }}'}\n"
            "  with_acme.secrets.vault: [a]\n"
            "- ansible.builtin.debug:\n"
            "    msg: \"{{ lookup('acme.vault.secret', 'x') }}\"\n"
        },
    )
    with caplog.at_level(logging.WARNING, logger=introspection.__name__):
        found = bundled(role)
    assert found == {"acme.secrets": "", "acme.vault": ""}
    warned = sorted(getattr(r, "collection", "") for r in caplog.records)
    assert warned == ["acme.secrets", "acme.vault"]
