"""Read an existing role and write the package manifest for it (``nwb package init``).

Why by inspection: the teams we migrate have roles, not packages. Everything the manifest needs is
already in a well-kept role - galaxy_info, argument specs, task files named by habit - so the
default path is "point at the role, get a manifest", and the author edits only what conventions
cannot know.

Sources, first hit wins:
    name     --name; galaxy_info.role_name; the directory name (``_`` -> ``-``, lower case)
    version  --version; galaxy_info.version; the enclosing collection's galaxy.yml; the newest
             git tag reachable in the role's repository (a leading ``v`` dropped)
    stages   file conventions (manifest.py docstring)
    interrupt  a handler named like "reboot" -> reboot; handlers restarting literal services via
             service/systemd -> service with those units; otherwise none
    deps     meta/main.yml ``dependencies``
    collections  requirements.yml (role or meta/), meta/main.yml ``collections``, and FQCNs used in
             the role: module keys of tasks/handlers, ``with_<ns>.<coll>.<lookup>`` loop keys,
             and ``lookup``/``query``/``q`` calls, filters (``| ns.coll.f``) and tests
             (``is ns.coll.t``) inside Jinja in tasks, handlers, defaults, vars and templates;
             bundled at the version installed here (no Galaxy)
    schema   meta/argument_specs.yml (or ``argument_specs`` in meta/main.yml)

Roles inside collections (``.../ansible_collections/ns/coll/roles/role``) get ``role_fqcn``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import semver
import yaml

from lifecycle.spec import Interrupt, InterruptType
from playbook_adapter import argspec
from playbook_adapter.errors import RoleLayoutError
from playbook_adapter.manifest import (
    MANIFEST_FILE,
    AgentStage,
    BundledCollection,
    EntryKind,
    PackageManifest,
    StageEntry,
    load_manifest,
)

logger = logging.getLogger(__name__)

CHECK_FILES = ("tasks/verify.yml", "tasks/check.yml", "tasks/validate.yml")
MOLECULE_VERIFY = "molecule/default/verify.yml"
UNINSTALL_CHECK_FILES = ("tasks/uninstall_check.yml", "tasks/verify_uninstall.yml")
# Collections that ship with ansible-core itself: never bundled.
CORE_NAMESPACES = {"ansible.builtin", "ansible.legacy", "ansible.windows"}
FQCN = re.compile(r"^([a-z0-9_]+)\.([a-z0-9_]+)\.[a-z0-9_.]+$")
# A loop keyword names a lookup plugin: with_items is ansible.builtin.items, with_ns.coll.x is
# the lookup ns.coll.x (the loop keyword is not a module, so never a collection "with_ns.coll").
WITH_LOOKUP = re.compile(r"^with_(?:([a-z0-9_]+)\.([a-z0-9_]+)\.[a-z0-9_.]+)?")
_JINJA_FQCN = r"([a-z0-9_]+)\.([a-z0-9_]+)\.[a-z0-9_]+"
# Plugins named inside Jinja expressions: lookup('ns.coll.x', ...), query(...), q(...),
# `| ns.coll.filter` and `is ns.coll.test`.
JINJA_PLUGIN = re.compile(
    rf"""\b(?:lookup|query|q)\(\s*['"]{_JINJA_FQCN}['"]"""
    rf"|\|\s*{_JINJA_FQCN}\b"
    rf"|\bis\s+(?:not\s+)?{_JINJA_FQCN}\b"
)
# Task keywords whose value is a bare Jinja expression, without {{ }}.
CONDITION_KEYS = frozenset({"when", "changed_when", "failed_when", "until"})
_JINJA_BLOCK = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)
JINJA_DIRS = ("defaults", "vars")
TEMPLATE_DIR = "templates"
TASK_CONTAINERS = ("block", "rescue", "always")


@dataclass(frozen=True, slots=True)
class RoleInfo:
    """What ``nwb package inspect`` shows for a role directory or a package directory."""

    manifest: PackageManifest
    path: Path
    size_bytes: int
    from_file: bool  # True when read from an existing nodewright-package.yaml


def stage_map(role: Path) -> dict[AgentStage, StageEntry]:
    """Stage -> task file by convention (only files that exist)."""
    stages: dict[AgentStage, StageEntry] = {}

    def add(stage: AgentStage, file: str, kind: EntryKind = EntryKind.TASKS) -> None:
        stages[stage] = StageEntry(file=file, kind=kind)

    main = _first_existing(role, ("tasks/main.yml", "tasks/main.yaml"))
    if main:
        add(AgentStage.APPLY, main)
        add(AgentStage.UPGRADE, main)
    for stage, stem in (
        (AgentStage.CONFIG, "tasks/config"),
        (AgentStage.UNINSTALL, "tasks/uninstall"),
        (AgentStage.POST_INTERRUPT, "tasks/post_interrupt"),
    ):
        found = _first_existing(role, (f"{stem}.yml", f"{stem}.yaml"))
        if found:
            add(stage, found)
    check = _first_existing(role, CHECK_FILES)
    check_kind = EntryKind.TASKS
    if check is None and (role / MOLECULE_VERIFY).is_file():
        check, check_kind = MOLECULE_VERIFY, EntryKind.PLAYBOOK
    if check:
        for stage, checked in (
            (AgentStage.APPLY_CHECK, AgentStage.APPLY),
            (AgentStage.UPGRADE_CHECK, AgentStage.UPGRADE),
            (AgentStage.CONFIG_CHECK, AgentStage.CONFIG),
            (AgentStage.POST_INTERRUPT_CHECK, AgentStage.POST_INTERRUPT),
        ):
            # config-check also guards a role without config.yml: config vars feed main.yml.
            if checked in stages or checked is AgentStage.CONFIG:
                add(stage, check, check_kind)
    uninstall_check = _first_existing(role, UNINSTALL_CHECK_FILES)
    if uninstall_check:
        add(AgentStage.UNINSTALL_CHECK, uninstall_check)
    return stages


def introspect_role(
    role: Path,
    *,
    version: str | None = None,
    name: str | None = None,
    interrupt: Interrupt | None = None,
    fallback_version: str | None = None,
) -> PackageManifest:
    """Build the manifest for a role directory (nothing is written)."""
    role = role.resolve()
    if not role.is_dir() or not ((role / "tasks").is_dir() or (role / "meta").is_dir()):
        raise RoleLayoutError(f"{role}: not an Ansible role (no tasks/ or meta/ directory)")
    meta = _yaml_file(role / "meta" / "main.yml") or _yaml_file(role / "meta" / "main.yaml") or {}
    galaxy_info = meta.get("galaxy_info") or {}
    collection = _enclosing_collection(role)

    role_name = str(galaxy_info.get("role_name") or role.name)
    package_name = name or re.sub(r"[^a-z0-9-]+", "-", role_name.lower()).strip("-")
    resolved_version = (
        version
        or _str_or_none(galaxy_info.get("version"))
        or (collection.version if collection else None)
        or _git_tag_version(role)
        or fallback_version
    )
    if not resolved_version:
        raise RoleLayoutError(
            f"{role}: no version found (meta/main.yml, galaxy.yml, git tag); pass --version"
        )
    resolved_version = resolved_version.removeprefix("v")
    if not semver.Version.is_valid(resolved_version):
        raise RoleLayoutError(f"{role}: version {resolved_version!r} is not strict semver x.y.z")

    specs = _yaml_file(role / "meta" / "argument_specs.yml") or _yaml_file(
        role / "meta" / "argument_specs.yaml"
    )
    raw_specs = (specs or {}).get("argument_specs") or meta.get("argument_specs")
    schema: dict[str, Any] = (
        argspec.argument_specs_to_schema(raw_specs) if raw_specs else {"type": "object"}
    )
    # Ansible checks `required` against the role's merged vars, where defaults/main.yml already
    # supplies a value; the CR's vars alone need not repeat it.
    defaults = _yaml_file(role / "defaults" / "main.yml") or {}
    if "required" in schema:
        schema["required"] = [n for n in schema["required"] if n not in defaults]
        if not schema["required"]:
            del schema["required"]

    stages = stage_map(role)
    if AgentStage.APPLY not in stages:
        raise RoleLayoutError(f"{role}: no tasks/main.yml, nothing to apply")
    return PackageManifest(
        name=package_name,
        version=resolved_version,
        role=".",
        role_fqcn=f"{collection.fqcn}.{role.name}" if collection else "",
        stages=stages,
        interrupt=interrupt or detect_interrupt(role),
        argument_schema=schema,
        collections=bundled_collections(role, meta, own=collection.fqcn if collection else None),
        role_dependencies=role_dependencies(meta),
        description=str(galaxy_info.get("description") or "").strip(),
    )


def write_manifest(role: Path, manifest: PackageManifest) -> Path:
    path = role / MANIFEST_FILE
    path.write_text(
        "# Written by `nwb package init`; edit freely, `nwb package inspect` shows the result.\n"
        + manifest.to_yaml(),
        encoding="utf-8",
    )
    return path


def inspect_path(path: Path) -> RoleInfo:
    """Manifest (from the file, or by convention when there is none), and the size on disk."""
    path = path.resolve()
    if (path / MANIFEST_FILE).is_file():
        manifest, from_file = load_manifest(path), True
    else:
        manifest, from_file = introspect_role(path, version=None), False
    return RoleInfo(manifest=manifest, path=path, size_bytes=_tree_size(path), from_file=from_file)


def detect_interrupt(role: Path) -> Interrupt | None:
    return interrupt_from_handlers(list(_tasks_in(role / "handlers")))


def interrupt_from_handlers(handlers: Sequence[Mapping[str, Any]]) -> Interrupt | None:
    """The default interrupt the handlers imply (see the module docstring)."""
    if any("reboot" in str(h.get("name", "")).lower() for h in handlers):
        return Interrupt(type=InterruptType.REBOOT)
    services: list[str] = []
    for handler in handlers:
        for key in ("ansible.builtin.systemd", "ansible.builtin.service", "systemd", "service"):
            args = handler.get(key)
            if isinstance(args, Mapping) and args.get("state") in ("restarted", "reloaded"):
                unit = str(args.get("name", ""))
                if unit and "{{" not in unit and unit not in services:
                    services.append(unit)
    if services:
        return Interrupt(type=InterruptType.SERVICE, services=services)
    return None


def role_dependencies(meta: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for dep in meta.get("dependencies") or []:
        if isinstance(dep, str):
            names.append(dep)
        elif isinstance(dep, Mapping) and (dep.get("role") or dep.get("name")):
            names.append(str(dep.get("role") or dep.get("name")))
    return names


def used_collections(role: Path, meta: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for req_file in (role / "requirements.yml", role / "meta" / "requirements.yml"):
        data = _yaml_file(req_file)
        entries = data.get("collections", []) if isinstance(data, dict) else []
        for entry in entries or []:
            fqcn = entry.get("name") if isinstance(entry, Mapping) else entry
            if isinstance(fqcn, str) and fqcn.count(".") == 1:
                names.add(fqcn)
    for fqcn in meta.get("collections") or []:
        if isinstance(fqcn, str) and fqcn.count(".") == 1:
            names.add(fqcn)
    for directory in (role / "tasks", role / "handlers"):
        for task in _tasks_in(directory):
            names |= task_collections(task)
    for vars_dir in JINJA_DIRS:
        for data in _yaml_files_in(role / vars_dir):
            for text in _strings(data):
                names |= jinja_collections(text)
    templates = role / TEMPLATE_DIR
    if templates.is_dir():
        for path in sorted(p for p in templates.rglob("*") if p.is_file()):
            try:
                names |= jinja_collections(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                continue  # a binary file under templates/ holds no Jinja
    return {n for n in names if n not in CORE_NAMESPACES}


def task_collections(task: Mapping[str, Any]) -> set[str]:
    """Collections one task needs: its module, a ``with_<lookup>`` loop, plugins in its Jinja.

    Nested ``block``/``rescue``/``always`` tasks are not followed (``_tasks_in`` yields them).
    """
    names: set[str] = set()
    for key, value in task.items():
        key_text = str(key)
        loop = WITH_LOOKUP.match(key_text)
        if loop:
            if loop.group(1):
                names.add(f"{loop.group(1)}.{loop.group(2)}")
        else:
            module = FQCN.match(key_text)
            if module:
                names.add(f"{module.group(1)}.{module.group(2)}")
        if key_text in TASK_CONTAINERS:
            continue
        for text in _strings(value):
            names |= jinja_collections(text, bare=key_text in CONDITION_KEYS)
    return names


def jinja_collections(text: str, *, bare: bool = False) -> set[str]:
    """Collections of the lookups, filters and tests named by FQCN in Jinja.

    Only text inside ``{{ }}`` / ``{% %}`` counts (a task name saying "is ansible.posix.sysctl
    based" needs nothing), unless ``bare``: ``when`` and friends are expressions without braces.
    """
    names: set[str] = set()
    segments = [text] if bare else _JINJA_BLOCK.findall(text)
    for segment in segments:
        for match in JINJA_PLUGIN.finditer(segment):
            groups = [g for g in match.groups() if g]
            names.add(f"{groups[0]}.{groups[1]}")
    return names


def bundled_collections(
    role: Path, meta: Mapping[str, Any], *, own: str | None = None
) -> list[BundledCollection]:
    installed = installed_collections()
    bundled = []
    for fqcn in sorted(used_collections(role, meta)):
        if fqcn == own:
            continue
        if fqcn not in installed:
            logger.warning("collection not installed, cannot bundle", extra={"collection": fqcn})
        bundled.append(BundledCollection(name=fqcn, version=installed.get(fqcn, "")))
    return bundled


def collection_roots() -> list[Path]:
    """Directories holding ``ansible_collections/`` that this Python's Ansible sees by default."""
    roots: list[Path] = []
    spec = importlib.util.find_spec("ansible_collections")
    for location in (spec.submodule_search_locations or []) if spec else []:
        roots.append(Path(location).parent)
    for default in (
        Path.home() / ".ansible" / "collections",
        Path("/usr/share/ansible/collections"),
    ):
        if (default / "ansible_collections").is_dir():
            roots.append(default)
    return roots


def installed_collections() -> dict[str, str]:
    """FQCN -> version of the collections installed here (first root wins)."""
    found: dict[str, str] = {}
    for root in collection_roots():
        base = root / "ansible_collections"
        for manifest in sorted(base.glob("*/*/MANIFEST.json")):
            fqcn = f"{manifest.parent.parent.name}.{manifest.parent.name}"
            if fqcn in found:
                continue
            try:
                info = json.loads(manifest.read_text(encoding="utf-8"))["collection_info"]
                found[fqcn] = str(info.get("version", ""))
            except (ValueError, KeyError, OSError):
                found[fqcn] = ""
    return found


@dataclass(frozen=True, slots=True)
class _Collection:
    fqcn: str
    version: str | None


def _enclosing_collection(role: Path) -> _Collection | None:
    # .../ansible_collections/<ns>/<coll>/roles/<role>
    if role.parent.name != "roles":
        return None
    coll_dir = role.parent.parent
    galaxy = _yaml_file(coll_dir / "galaxy.yml")
    if galaxy and galaxy.get("namespace") and galaxy.get("name"):
        return _Collection(
            f"{galaxy['namespace']}.{galaxy['name']}", _str_or_none(galaxy.get("version"))
        )
    if coll_dir.parent.parent.name == "ansible_collections":
        return _Collection(f"{coll_dir.parent.name}.{coll_dir.name}", None)
    return None


def _git_tag_version(role: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(role), "describe", "--tags", "--abbrev=0"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    tag = out.stdout.strip().rsplit("/", 1)[-1]
    return tag if out.returncode == 0 and tag else None


def _tasks_in(directory: Path) -> Iterator[Mapping[str, Any]]:
    """Every task (recursing into blocks) of every YAML file in ``directory``."""
    if not directory.is_dir():
        return
    for path in sorted([*directory.rglob("*.yml"), *directory.rglob("*.yaml")]):
        data = _yaml_file(path, expect=list)
        yield from _flatten(data or [])


def _yaml_files_in(directory: Path) -> Iterator[Any]:
    if not directory.is_dir():
        return
    for path in sorted([*directory.rglob("*.yml"), *directory.rglob("*.yaml")]):
        yield _yaml_file(path, expect=object)


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a YAML value (mapping values and list items, recursively)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _flatten(tasks: list[Any]) -> Iterator[Mapping[str, Any]]:
    for task in tasks:
        if not isinstance(task, Mapping):
            continue
        yield task
        for key in TASK_CONTAINERS:
            inner = task.get(key)
            if isinstance(inner, list):
                yield from _flatten(inner)


def _yaml_file(path: Path, expect: type = dict) -> Any:
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RoleLayoutError(f"{path}: not valid YAML: {exc}") from exc
    return data if isinstance(data, expect) else None


def _first_existing(role: Path, candidates: tuple[str, ...]) -> str | None:
    return next((c for c in candidates if (role / c).is_file()), None)


def _str_or_none(value: object) -> str | None:
    return str(value) if value not in (None, "") else None


def _tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
