"""The package manifest, ``nodewright-package.yaml``: what turns a role into a NodeWright package.

Why a manifest at all: the controller and the agent must agree, without looking inside the role,
on which task file runs for which stage, which interrupt the package needs by default, which vars
it accepts (a JSON Schema, checked before any node is touched) and which collections and roles
travel with it. ``nwb package init`` writes it by convention (``introspection.py``); authors may
edit it; ``nwb package build`` copies it into the image at ``/nodewright/package/``.

Stage map conventions (paths relative to the role directory):

    tasks/main.yml            -> apply, upgrade
    tasks/config.yml          -> config
    tasks/uninstall.yml       -> uninstall
    tasks/post_interrupt.yml  -> post-interrupt
    first of tasks/verify.yml, tasks/check.yml, tasks/validate.yml, molecule/default/verify.yml
                              -> apply-check, upgrade-check, config-check, post-interrupt-check
    tasks/uninstall_check.yml or tasks/verify_uninstall.yml -> uninstall-check

A stage entry is a task file (run with ``include_role`` + ``tasks_from``) or, for molecule's
``verify.yml``, a playbook (run as its own play against the node). A stage without an entry is a
no-op for that package, as in NodeWright.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

import semver
import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from lifecycle.spec import Interrupt
from lifecycle.wire import InputModel
from playbook_adapter.errors import ManifestError

MANIFEST_FILE = "nodewright-package.yaml"
MANIFEST_API_VERSION = "bridge.nodewright.io/package-v1"


class AgentStage(StrEnum):
    """Stages the agent can run (``nwb-agent run --stages``); checks follow their stage."""

    APPLY = "apply"
    APPLY_CHECK = "apply-check"
    CONFIG = "config"
    CONFIG_CHECK = "config-check"
    UPGRADE = "upgrade"
    UPGRADE_CHECK = "upgrade-check"
    POST_INTERRUPT = "post-interrupt"
    POST_INTERRUPT_CHECK = "post-interrupt-check"
    UNINSTALL = "uninstall"
    UNINSTALL_CHECK = "uninstall-check"

    @property
    def is_check(self) -> bool:
        return self.value.endswith("-check")


class EntryKind(StrEnum):
    TASKS = "tasks"  # a role task file: include_role tasks_from
    PLAYBOOK = "playbook"  # a whole playbook (molecule verify.yml)


class StageEntry(InputModel):
    file: str = Field(description="Path relative to the role directory.")
    kind: EntryKind = Field(default=EntryKind.TASKS, description="tasks (task file) or playbook.")

    @model_validator(mode="before")
    @classmethod
    def _from_short_form(cls, value: object) -> object:
        # `apply: tasks/main.yml` is the short form of `apply: {file: tasks/main.yml}`.
        if isinstance(value, str):
            return {"file": value}
        return value

    @field_validator("file")
    @classmethod
    def _relative_inside_role(cls, value: str) -> str:
        path = Path(value)
        if path.is_absolute() or ".." in path.parts or not value:
            raise ValueError("must be a relative path inside the role")
        return value


class BundledCollection(InputModel):
    name: str = Field(description="Collection FQCN (namespace.name).")
    version: str = Field(default="", description="Version bundled (from what is installed).")

    @field_validator("name")
    @classmethod
    def _fqcn(cls, value: str) -> str:
        parts = value.split(".")
        if len(parts) != 2 or not all(p.isidentifier() for p in parts):
            raise ValueError("must be namespace.name")
        return value


class PackageManifest(InputModel):
    api_version: str = Field(default=MANIFEST_API_VERSION, description="Manifest format.")
    name: str = Field(
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="Package name (DNS label; used in labels and pod names).",
    )
    version: str = Field(description="Strict semver x.y.z[-pre][+build].")
    role: str = Field(default=".", description="Role directory relative to the manifest.")
    role_fqcn: str = Field(
        default="", description="ns.coll.role when the role lives inside a collection."
    )
    stages: dict[AgentStage, StageEntry] = Field(
        default_factory=dict, description="Stage -> task file (or playbook) in the role."
    )
    interrupt: Interrupt | None = Field(
        default=None, description="Default interrupt after apply/config (a CR may override)."
    )
    argument_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object"},
        description="JSON Schema of the vars, from meta/argument_specs.yml.",
    )
    collections: list[BundledCollection] = Field(
        default_factory=list, description="Collections bundled with the package."
    )
    role_dependencies: list[str] = Field(
        default_factory=list, description="Roles from meta/main.yml dependencies (bundled)."
    )
    depends_on: dict[str, str] = Field(
        default_factory=dict, description="Package name -> version that must be applied first."
    )
    description: str = Field(default="", description="One line from galaxy_info.")

    @field_validator("version")
    @classmethod
    def _strict_semver(cls, value: str) -> str:
        if not semver.Version.is_valid(value):
            raise ValueError("must be strict semver x.y.z (no 'v' prefix)")
        return value

    @field_validator("api_version")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value != MANIFEST_API_VERSION:
            raise ValueError(f"unsupported manifest format, expected {MANIFEST_API_VERSION}")
        return value

    def entry(self, stage: AgentStage) -> StageEntry | None:
        return self.stages.get(stage)

    def to_yaml(self) -> str:
        data = self.to_wire()
        data["stages"] = {
            str(stage): entry.file if entry.kind is EntryKind.TASKS else entry.to_wire()
            for stage, entry in self.stages.items()
        }
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)


def problems_of(error: ValidationError, prefix: str = "") -> list[str]:
    """One line per problem, ``field.path: message`` (no input values: they may be secrets)."""
    lines = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(root)"
        lines.append(f"{prefix}{path}: {item['msg']}")
    return lines


def parse_manifest(text: str, *, source: str = MANIFEST_FILE) -> PackageManifest:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: must be a mapping")
    try:
        return PackageManifest.model_validate(data)
    except ValidationError as exc:
        raise ManifestError(
            f"{source}: invalid manifest", problems_of(exc, prefix=f"{source}: ")
        ) from exc


def load_manifest(package_dir: Path) -> PackageManifest:
    path = package_dir / MANIFEST_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ManifestError(f"{path}: no package manifest (run `nwb package init`)") from exc
    return parse_manifest(text, source=str(path))


def role_dir(package_dir: Path, manifest: PackageManifest) -> Path:
    return (package_dir / manifest.role).resolve()


def missing_stage_files(package_dir: Path, manifest: PackageManifest) -> list[str]:
    """Stage entries whose file does not exist (bad input: exit 2 before anything runs)."""
    base = role_dir(package_dir, manifest)
    return [
        f"stages.{stage}: {entry.file} not found in {base}"
        for stage, entry in manifest.stages.items()
        if not (base / entry.file).is_file()
    ]
