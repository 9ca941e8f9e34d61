"""Turn pydantic validation failures into one line per problem with its wire path.

Why: bad input must be reported the same way everywhere (``nwb plan`` exit 2, the collection's
check mode, the controller's ``InvalidSpec`` condition): ``spec.packages.gpu-tuning.version:
"1.2" is not strict semver (MAJOR.MINOR.PATCH)``. Paths use camelCase wire names whether the
document was written with wire names or Python names, and map keys / list indexes stay as given.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from lifecycle.errors import SpecError
from lifecycle.spec import RULE_ERROR, DeploymentPolicy, NodeWright

_M = TypeVar("_M", bound=BaseModel)


def _unwrap_optional(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _wire_path(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """Walk ``loc`` through the model's types, renaming field names to their wire aliases."""
    parts: list[str] = []
    current: Any = model
    for item in loc:
        current = _unwrap_optional(current)
        origin = typing.get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(item, str):
            field = current.model_fields.get(item)
            if field is None:
                field = next((f for f in current.model_fields.values() if f.alias == item), None)
            if field is None:
                parts.append(item)
                current = None
                continue
            parts.append(field.alias or item)
            current = field.annotation
        elif origin is dict:
            parts.append(str(item))
            current = typing.get_args(current)[1]
        elif origin is list and isinstance(item, int):
            if parts:
                parts[-1] = f"{parts[-1]}[{item}]"
            else:
                parts.append(f"[{item}]")
            current = typing.get_args(current)[0]
        else:
            parts.append(str(item))
            current = None
    return parts


def _join(base: list[str], extra: str) -> str:
    if not extra:
        return ".".join(base)
    if extra.startswith("["):
        return ".".join(base) + extra
    return ".".join([*base, extra])


def problems(model: type[BaseModel], error: ValidationError) -> list[str]:
    """One ``path: message`` line per problem in ``error``, for documents of type ``model``."""
    lines: list[str] = []
    for err in error.errors(include_url=False):
        base = _wire_path(model, err["loc"])
        ctx = err.get("ctx") or {}
        if err["type"] == RULE_ERROR and "problems" in ctx:
            for rel, message in ctx["problems"]:
                path = _join(base, rel)
                lines.append(f"{path}: {message}" if path else message)
            continue
        path = ".".join(base)
        message = err["msg"]
        if err["type"] == "missing":
            message = "required field is missing"
        elif err["type"] == "extra_forbidden":
            message = "unknown field (check the spelling)"
        lines.append(f"{path}: {message}" if path else message)
    return lines


def _load(model: type[_M], doc: Mapping[str, Any], kind: str) -> _M:
    if not isinstance(doc, Mapping):
        raise SpecError(
            [f"expected a {kind} object (a mapping), got {type(doc).__name__}"], kind=kind
        )
    try:
        return model.model_validate(dict(doc))
    except ValidationError as exc:
        raise SpecError(problems(model, exc), kind=kind) from None


def load_nodewright(doc: Mapping[str, Any]) -> NodeWright:
    """Validate a NodeWright document (``apiVersion``/``kind``/``metadata``/``spec``).

    Raises:
        SpecError: with one ``path: message`` line per problem.
    """
    return _load(NodeWright, doc, "NodeWright")


def load_policy(doc: Mapping[str, Any]) -> DeploymentPolicy:
    """Validate a DeploymentPolicy document.

    Raises:
        SpecError: with one ``path: message`` line per problem.
    """
    return _load(DeploymentPolicy, doc, "DeploymentPolicy")
