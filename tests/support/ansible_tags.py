"""Ansible's own answer to "does ``ansible-playbook --tags ONLY --skip-tags SKIP`` run a task
tagged TAGS?" - a real Task in a real Play, evaluated by ``Taggable.evaluate_tags``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play import Play
from ansible.vars.manager import VariableManager

_LOADER = DataLoader()
# Tags with a meaning of their own; the rest of a vocabulary is plain names.
SPECIAL = ["always", "never", "all", "tagged", "untagged"]


def runs(tags: Sequence[str], only: Sequence[str], skip: Sequence[str]) -> bool:
    task: dict[str, Any] = {"name": "t", "debug": {"msg": "x"}}
    if tags:
        task["tags"] = list(tags)
    play = Play.load(
        {"hosts": "all", "tasks": [task]},
        loader=_LOADER,
        variable_manager=VariableManager(loader=_LOADER),
    )
    (compiled,) = [t for block in play.get_tasks() for t in block]
    # ansible-playbook's default is --tags all; --skip-tags defaults to none.
    return bool(compiled.evaluate_tags(list(only) or ["all"], list(skip), {}))
