"""Shared base classes for wire shapes (CRD spec/status, manifests, agent results).

Why one base: field names are camelCase on the wire and snake_case in Python, models are frozen so a
snapshot cannot be mutated by accident while planning, and user-authored input rejects unknown keys
(a typo in a CR must fail loudly) while objects read back from the API ignore them (forward
compatibility with newer controllers).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """Frozen camelCase model that ignores unknown keys (objects read back from the API)."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="ignore",
    )

    def to_wire(self) -> dict[str, object]:
        """Serialize the way the API expects: camelCase, JSON types, unset optionals omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class InputModel(WireModel):
    """User-authored input: unknown keys are errors, so a typo is never silently ignored."""

    model_config = ConfigDict(extra="forbid")
