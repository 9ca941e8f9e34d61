"""Action values: immutable, comparable, and the union names every kind."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from lifecycle import actions as act


def test_actions_are_frozen_values_that_compare_by_content() -> None:
    a = act.Cordon(node="n1", holder="tune", was_unschedulable=False)
    assert a == act.Cordon(node="n1", holder="tune", was_unschedulable=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.node = "n2"  # type: ignore[misc]


def test_the_action_union_covers_every_action_class_in_the_module() -> None:
    classes = {
        obj
        for obj in vars(act).values()
        if isinstance(obj, type)
        and dataclasses.is_dataclass(obj)
        and obj.__module__ == act.__name__
    }
    assert set(typing.get_args(act.Action)) == classes


def test_actions_use_slots_to_stay_small() -> None:
    assert not hasattr(act.DeletePod(name="p", node="n", reason="r"), "__dict__")
