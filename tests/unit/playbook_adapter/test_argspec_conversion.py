"""meta/argument_specs.yml options become JSON Schema, and vars are judged by it before any run."""

from __future__ import annotations

from typing import Any

import pytest

from playbook_adapter import argspec
from playbook_adapter.errors import RoleLayoutError, VarsError


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ({"type": "str"}, {"type": "string"}),
        ({"type": "path"}, {"type": "string"}),
        ({"type": "int"}, {"type": "integer"}),
        ({"type": "float"}, {"type": "number"}),
        ({"type": "bool", "default": True}, {"type": "boolean", "default": True}),
        ({"type": "raw"}, {}),
        ({}, {}),
        ({"type": "list"}, {"type": "array"}),
        ({"type": "list", "elements": "int"}, {"type": "array", "items": {"type": "integer"}}),
        ({"type": "dict"}, {"type": "object"}),
        ({"type": "str", "choices": ["a", "b"]}, {"type": "string", "enum": ["a", "b"]}),
        (
            {"type": "list", "elements": "str", "choices": ["x", "y"]},
            {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
        ),
        (
            {"type": "str", "description": ["Two", "lines."]},
            {"type": "string", "description": "Two lines."},
        ),
        ({"type": "str", "no_log": True}, {"type": "string", "x-no-log": True}),
        (
            {"type": "dict", "options": {"port": {"type": "int", "required": True}}},
            {
                "type": "object",
                "properties": {"port": {"type": "integer"}},
                "required": ["port"],
                "additionalProperties": False,
            },
        ),
        (
            {"type": "list", "elements": "dict", "options": {"name": {"type": "str"}}},
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "additionalProperties": False,
                },
            },
        ),
    ],
)
def test_each_ansible_option_shape_maps_to_its_json_schema(
    option: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert argspec.option_schema("opt", option) == expected


SPECS = {
    "main": {
        "options": {
            "port": {"type": "int", "required": True},
            "mode": {"type": "str", "choices": ["fast", "safe"], "default": "safe"},
            "token": {"type": "str", "no_log": True},
            "user": {"type": "str"},
            "group": {"type": "str"},
            "servers": {
                "type": "list",
                "elements": "dict",
                "options": {"host": {"type": "str", "required": True}, "weight": {"type": "int"}},
            },
        },
        "mutually_exclusive": [["token", "user"]],
        "required_together": [["user", "group"]],
    },
    "verify": {"options": {"ignored": {"type": "int"}}},
}


def schema() -> dict[str, Any]:
    return argspec.argument_specs_to_schema(SPECS)


def test_the_main_entry_point_is_used_and_other_vars_stay_allowed() -> None:
    result = schema()
    assert "ignored" not in result["properties"]
    assert result["required"] == ["port"]
    assert "additionalProperties" not in result
    assert argspec.vars_problems(result, {"port": 1, "some_group_var": "anything"}) == []


def test_without_a_main_entry_point_all_entry_points_are_merged() -> None:
    merged = argspec.argument_specs_to_schema(
        {"a": {"options": {"x": {}}}, "b": {"options": {"y": {}}}}
    )
    assert set(merged["properties"]) == {"x", "y"}


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({}, "vars.port: required (rule: required)"),
        ({"port": "80"}, "vars.port: must be of type integer (rule: type)"),
        (
            {"port": 1, "mode": "turbo"},
            "vars.mode: must be one of ['fast', 'safe'] (rule: choices)",
        ),
        (
            {"port": 1, "servers": [{"weight": 1}]},
            "vars.servers[0].host: required (rule: required)",
        ),
        (
            {"port": 1, "servers": [{"host": "a", "colour": 1}]},
            "vars.servers[0]: unknown option(s) colour (rule: options)",
        ),
        (
            {"port": 1, "token": "t0ken", "user": "u", "group": "g"},
            "vars: options token, user are mutually exclusive",
        ),
        (
            {"port": 1, "user": "u"},
            "vars: options must be given together: {'user': ['group'], 'group': ['user']}"
            " (rule: required_together)",
        ),
    ],
)
def test_a_violation_names_the_var_and_the_rule(values: dict[str, Any], problem: str) -> None:
    assert problem in argspec.vars_problems(schema(), values)


def test_a_rejected_secret_value_is_never_echoed() -> None:
    with pytest.raises(VarsError) as caught:
        argspec.validate_vars(schema(), {"port": 1, "token": ["s3cr3t-value"]})
    assert caught.value.problems == ["vars.token: must be of type string (rule: type)"]
    assert "s3cr3t" not in str(caught.value.problems)


def test_no_log_options_are_listed_for_redaction() -> None:
    assert argspec.no_log_vars(schema()) == {"token"}


def test_an_unknown_ansible_type_is_a_role_layout_error() -> None:
    with pytest.raises(RoleLayoutError, match="unknown type 'strng'"):
        argspec.option_schema("x", {"type": "strng"})
