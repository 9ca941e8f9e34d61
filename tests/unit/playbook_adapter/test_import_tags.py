"""Role-entry and play ``tags`` plus the playbook's ``--tags``/``--skip-tags`` become package
``tags``/``skipTags`` that run exactly the tasks ansible-playbook would run.

In Ansible, tags on a role entry or a play are inherited by every task under it and only the
command line selects; the agent sees the tasks' own tags. Checked against Ansible's own evaluation.
"""

from __future__ import annotations

from ansible_tags import SPECIAL, runs
from hypothesis import given, settings
from hypothesis import strategies as st

from playbook_adapter.importing import select_tags

# Tags a task or role entry carries: names, always, never (all/tagged/untagged are CLI words).
CARRIED = st.lists(st.sampled_from(["web", "db", "always", "never"]), unique=True, max_size=3)
CLI = st.lists(st.sampled_from(["web", "db", "misc", *SPECIAL]), unique=True, max_size=3)


@settings(max_examples=500, deadline=None)
@given(own=CARRIED, inherited=CARRIED, only=CLI, skip=CLI)
def test_the_package_runs_a_task_exactly_when_ansible_playbook_would(
    own: list[str], inherited: list[str], only: list[str], skip: list[str]
) -> None:
    expected = runs([*own, *inherited], only, skip)
    selection = select_tags(inherited, only, skip)
    actual = selection is not None and runs(own, selection.tags, selection.skip_tags)
    assert actual == expected, selection


def test_a_role_tag_without_command_line_tags_selects_nothing_away() -> None:
    assert select_tags(["web"], [], []) == select_tags([], [], [])


def test_the_role_tag_named_by_tags_runs_the_whole_role_and_a_skipped_one_drops_it() -> None:
    whole = select_tags(["web"], ["web"], [])
    assert whole is not None and set(whole.tags) == {"all", "never"}
    assert select_tags(["web"], [], ["web"]) is None
    other = select_tags(["web"], ["db"], ["slow"])
    assert other is not None and (other.tags, other.skip_tags) == (("db",), ("slow",))
