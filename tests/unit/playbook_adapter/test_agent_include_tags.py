"""The agent's include of the role must not hide tasks that ``--tags``/``--skip-tags`` select.

Checked against Ansible's own tag evaluation (``Taggable.evaluate_tags``) on real Task objects,
for every combination hypothesis finds of the special tags and two plain ones.
"""

from __future__ import annotations

from ansible_tags import SPECIAL, runs
from hypothesis import given, settings
from hypothesis import strategies as st

from playbook_adapter.agent import playbooks
from playbook_adapter.agent.settings import AgentSettings

WORDS = ["web", "db", *SPECIAL, playbooks.INCLUDE_TAG]
TAG_SETS = st.lists(st.sampled_from(WORDS), unique=True, max_size=4)


@settings(max_examples=400, deadline=None)
@given(own=TAG_SETS, only=TAG_SETS, skip=TAG_SETS)
def test_the_include_runs_whenever_a_task_of_the_role_would(
    own: list[str], only: list[str], skip: list[str]
) -> None:
    own = [t for t in own if t != playbooks.INCLUDE_TAG]  # a role does not use our private tag
    skip = [t for t in skip if t != playbooks.INCLUDE_TAG]
    if runs(own, only, skip):
        assert runs(playbooks.include_tags(only, skip), only, skip)


def test_the_include_is_tagged_always_in_the_common_case_and_reads_the_env() -> None:
    settings_ = AgentSettings.from_env({"NW_TAGS": "web, db,,web", "NW_SKIP_TAGS": "slow"})
    assert (settings_.tags, settings_.skip_tags) == (("web", "db"), ("slow",))
    assert playbooks.include_tags(settings_.tags, settings_.skip_tags) == ["always"]
    assert AgentSettings.from_env({}).tags == ()
