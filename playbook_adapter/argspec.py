"""Role argument specs (``meta/argument_specs.yml``) as JSON Schema, and vars checked against it.

Why: a CR's vars are checked by the controller (and by ``nwb package test``) before any node is
touched, with the same rules Ansible would apply when the role starts - but Ansible would only
find out on the node, one node at a time, after the cordon and drain. JSON Schema is what the
manifest carries, because the controller validates without Ansible installed.

Mapping (Ansible option -> JSON Schema):
    type str/path -> string; int -> integer; float -> number; bool -> boolean; list -> array
    (``elements`` -> items); dict -> object (``options`` -> properties, unknown sub-keys rejected,
    as Ansible does for sub-options); raw or no type -> any; bits/bytes/json/jsonarg -> string.
    choices -> enum; default -> default; required -> parent's ``required``; description joined;
    no_log -> ``x-no-log: true`` (the agent loads such vars with no_log; errors never show values).
    mutually_exclusive / required_together / required_one_of -> not/dependentRequired/anyOf.
    Top level allows other keys: a role's vars are open-ended (group vars, facts, ...).

Caveats: Ansible coerces ("5" is accepted for int, "yes" for bool); CR vars are JSON, so we ask
for real JSON types. ``aliases``, ``apply_defaults`` and ``required_if`` are not translated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError as SchemaError

from playbook_adapter.errors import RoleLayoutError, VarsError

JSON_TYPES: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "path": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "list": {"type": "array"},
    "dict": {"type": "object"},
    "raw": {},
    "bits": {"type": "string"},
    "bytes": {"type": "string"},
    "json": {"type": "string"},
    "jsonarg": {"type": "string"},
}
ANY_SCHEMA: dict[str, Any] = {"type": "object"}


def option_schema(name: str, option: Mapping[str, Any]) -> dict[str, Any]:
    """JSON Schema of one option of an argument spec."""
    if not isinstance(option, Mapping):
        raise RoleLayoutError(f"argument_specs: option {name}: must be a mapping")
    kind = str(option.get("type", "raw"))
    if kind not in JSON_TYPES:
        raise RoleLayoutError(f"argument_specs: option {name}: unknown type {kind!r}")
    schema: dict[str, Any] = dict(JSON_TYPES[kind])
    description = option.get("description")
    if isinstance(description, list):
        description = " ".join(str(line) for line in description)
    if description:
        schema["description"] = str(description)
    if "choices" in option:
        schema["enum"] = list(option["choices"])
    if "default" in option and option["default"] is not None:
        schema["default"] = option["default"]
    if option.get("no_log"):
        schema["x-no-log"] = True
    nested = option.get("options")
    if kind == "list":
        element = str(option.get("elements", "raw"))
        if element not in JSON_TYPES:
            raise RoleLayoutError(f"argument_specs: option {name}: unknown elements {element!r}")
        items: dict[str, Any] = dict(JSON_TYPES[element])
        if element == "dict" and isinstance(nested, Mapping):
            items.update(options_schema(nested, spec=option, closed=True, where=name))
        if "enum" in schema and element != "dict":
            items["enum"] = schema.pop("enum")
        if items:
            schema["items"] = items
    elif kind == "dict" and isinstance(nested, Mapping):
        schema.update(options_schema(nested, spec=option, closed=True, where=name))
    return schema


def options_schema(
    options: Mapping[str, Any], *, spec: Mapping[str, Any], closed: bool, where: str
) -> dict[str, Any]:
    """Object schema for a set of options plus the spec's cross-option rules."""
    properties = {
        str(key): option_schema(f"{where}.{key}", value) for key, value in options.items()
    }
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    required = sorted(
        str(k) for k, v in options.items() if isinstance(v, Mapping) and v.get("required")
    )
    if required:
        schema["required"] = required
    if closed:
        schema["additionalProperties"] = False
    rules: list[dict[str, Any]] = []
    for group in spec.get("mutually_exclusive", []) or []:
        rules.append({"not": {"required": list(group)}})
    for group in spec.get("required_one_of", []) or []:
        rules.append({"anyOf": [{"required": [member]} for member in group]})
    dependent: dict[str, list[str]] = {}
    for group in spec.get("required_together", []) or []:
        for member in group:
            dependent.setdefault(str(member), []).extend(str(m) for m in group if m != member)
    if dependent:
        schema["dependentRequired"] = dependent
    if rules:
        schema["allOf"] = rules
    return schema


def argument_specs_to_schema(specs: Mapping[str, Any], entry_point: str = "main") -> dict[str, Any]:
    """JSON Schema for a role's ``argument_specs`` mapping (``meta/argument_specs.yml``).

    The ``entry_point`` spec is used (``main``, which ``include_role`` checks by default); when a
    role has no ``main`` entry point, the options of all entry points are merged.
    """
    if not isinstance(specs, Mapping):
        raise RoleLayoutError("argument_specs: must be a mapping of entry points")
    entries = [specs[entry_point]] if entry_point in specs else list(specs.values())
    options: dict[str, Any] = {}
    merged_spec: dict[str, Any] = {}
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise RoleLayoutError("argument_specs: an entry point must be a mapping")
        options.update(entry.get("options") or {})
        for rule in ("mutually_exclusive", "required_one_of", "required_together"):
            merged_spec.setdefault(rule, []).extend(entry.get(rule) or [])
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    schema.update(options_schema(options, spec=merged_spec, closed=False, where="vars"))
    return schema


def no_log_vars(schema: Mapping[str, Any]) -> set[str]:
    """Top-level var names marked no_log in the schema."""
    properties = schema.get("properties") or {}
    return {
        name for name, sub in properties.items() if isinstance(sub, Mapping) and sub.get("x-no-log")
    }


def vars_problems(schema: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """One line per violation, naming the var and the rule; never the value."""
    validator = jsonschema.Draft202012Validator(schema)
    problems = [_describe(error) for error in validator.iter_errors(dict(values))]
    return sorted(set(problems))


def validate_vars(schema: Mapping[str, Any], values: Mapping[str, Any]) -> None:
    problems = vars_problems(schema, values)
    if problems:
        raise VarsError(f"{len(problems)} var(s) rejected by the argument schema", problems)


def _describe(error: SchemaError) -> str:
    path = "vars" + "".join(
        f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path
    )
    rule = str(error.validator)
    expected: Any = error.validator_value
    instance: Any = error.instance
    schema: Any = error.schema
    if rule == "required":
        missing = [name for name in expected if isinstance(instance, dict) and name not in instance]
        return f"{path}.{missing[0] if missing else '?'}: required (rule: required)"
    if rule == "type":
        return f"{path}: must be of type {expected} (rule: type)"
    if rule == "enum":
        return f"{path}: must be one of {expected} (rule: choices)"
    if rule == "additionalProperties":
        extra = sorted(set(instance) - set(schema.get("properties", {})))
        return f"{path}: unknown option(s) {', '.join(map(str, extra))} (rule: options)"
    if rule == "not":
        return f"{path}: options {', '.join(expected.get('required', []))} are mutually exclusive"
    if rule == "anyOf" and all("required" in sub for sub in expected):
        names = ", ".join(sub["required"][0] for sub in expected)
        return f"{path}: one of {names} is required (rule: required_one_of)"
    if rule == "dependentRequired":
        return f"{path}: options must be given together: {expected} (rule: required_together)"
    return f"{path}: violates {rule} {expected!r}"
