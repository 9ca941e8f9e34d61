"""A role's disruptive actions become requests the controller performs on a drained node.

Why: inside a stage the node may still run workloads (a package without a known interrupt is
applied without a drain), and a pod cannot reboot its own node and carry on. So the agent runs a
private copy of the role in which:

- a **reboot** - a handler named like "reboot", any task or handler using the reboot module, or a
  ``command``/``shell`` that reboots - only sets the fact ``nodewright_reboot_required``;
- a **service restart handler** (``service``/``systemd``/``systemd_service`` with
  ``state: restarted``), when the controller asks for it (``NW_DEFER_RESTARTS``; it does unless
  the CR sets the package's interrupt itself), only appends its unit to the fact
  ``nodewright_restart_services``. The unit keeps its original, possibly templated, expression.

The event collector turns those facts into ``rebootRequested`` and ``restartServices`` of the
result; the controller merges them into the package's interrupt and runs cordon, drain, the
interrupt and post-interrupt. Nothing is dropped: a request the CR's own interrupt overrides is
recorded on the node and announced as an Event. Reloads (``state: reloaded``) run in place.
The original role is never modified; a role with nothing to defer runs as it is.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REBOOT_FACT = "nodewright_reboot_required"
RESTART_FACT = "nodewright_restart_services"
UNIT_VAR = "nodewright_deferred_unit"
REBOOT_MODULES = frozenset({"reboot", "ansible.builtin.reboot", "ansible.legacy.reboot"})
SERVICE_MODULES = frozenset(
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in ("service", "systemd", "systemd_service")
)
COMMAND_MODULES = frozenset(
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in ("command", "shell", "raw")
)
REBOOT_COMMAND = re.compile(
    r"^\s*(?:sudo\s+)?(?:\S*/)?(?:reboot|shutdown\s+(?:-\w*r|--reboot)|systemctl\s+(?:--\S+\s+)*"
    r"reboot|init\s+6)\b"
)
COMMAND_SEPARATORS = re.compile(r"&&|\|\||[;&|\n]")
# Keys of the original handler/task that still make sense around a set_fact.
KEEP_KEYS = frozenset(
    {"name", "listen", "when", "tags", "vars", "loop", "loop_control", "register", "notify"}
)
TASK_LISTS = ("block", "rescue", "always")
YAML_SUFFIXES = (".yml", ".yaml")


@dataclass(frozen=True, slots=True)
class RunRoles:
    """The role to run and the role directories that shadow the package's own ``roles/``."""

    role: Path
    roles_dir: Path | None  # copies of bundled role dependencies that had something to defer
    deferred: tuple[str, ...]  # "reboot: <task>" / "restart: <task>", for the log


def roles_for_run(
    role: Path, bundled_roles: Path, work_dir: Path, *, defer_restarts: bool
) -> RunRoles:
    """Copy and rewrite the role (and bundled dependencies) that have something to defer."""
    deferred: list[str] = []
    run_role = role
    copy = _rewritten_copy(role, work_dir / "role", defer_restarts, deferred)
    if copy is not None:
        run_role = copy
    shadow = work_dir / "roles"
    shadowed = False
    if bundled_roles.is_dir():
        for dependency in sorted(p for p in bundled_roles.iterdir() if p.is_dir()):
            if dependency.resolve() == role.resolve():
                continue
            if _rewritten_copy(dependency, shadow, defer_restarts, deferred) is not None:
                shadowed = True
    return RunRoles(run_role, shadow if shadowed else None, tuple(deferred))


def _rewritten_copy(
    role: Path, dest_parent: Path, defer_restarts: bool, deferred: list[str]
) -> Path | None:
    rewrites: dict[Path, list[Any]] = {}
    for path in _yaml_files(role / "handlers"):
        tasks = _load(path)
        if tasks is not None and _rewrite(tasks, handler=True, defer=defer_restarts, out=deferred):
            rewrites[path.relative_to(role)] = tasks
    for path in _yaml_files(role / "tasks"):
        tasks = _load(path)
        if tasks is not None and _rewrite(tasks, handler=False, defer=False, out=deferred):
            rewrites[path.relative_to(role)] = tasks
    if not rewrites:
        return None
    copy = dest_parent / role.name
    shutil.copytree(role, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    for relative, tasks in rewrites.items():
        (copy / relative).write_text(
            yaml.safe_dump(tasks, sort_keys=False, width=1000), encoding="utf-8"
        )
    return copy


def _yaml_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in YAML_SUFFIXES)


def _load(path: Path) -> list[Any] | None:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None  # Ansible will report a broken file itself, with its own message
    return data if isinstance(data, list) else None


def _rewrite(tasks: list[Any], *, handler: bool, defer: bool, out: list[str]) -> bool:
    """Rewrite in place; True if anything changed (blocks are walked)."""
    changed = False
    for index, task in enumerate(tasks):
        if not isinstance(task, dict):
            continue
        for key in TASK_LISTS:
            child = task.get(key)
            if isinstance(child, list) and _rewrite(child, handler=handler, defer=defer, out=out):
                changed = True
        replacement = _replacement(task, handler=handler, defer=defer)
        if replacement is None:
            continue
        kind, new = replacement
        out.append(f"{kind}: {task.get('name') or _module_of(task)[0] or 'unnamed task'}")
        tasks[index] = new
        changed = True
    return changed


def _replacement(
    task: Mapping[str, Any], *, handler: bool, defer: bool
) -> tuple[str, dict[str, Any]] | None:
    module, args = _module_of(task)
    kept = {k: v for k, v in task.items() if k in KEEP_KEYS}
    commands = COMMAND_SEPARATORS.split(_command_line(args)) if module in COMMAND_MODULES else []
    reboots = module in REBOOT_MODULES or any(REBOOT_COMMAND.match(part) for part in commands)
    if handler and "reboot" in str(task.get("name", "")).lower():
        reboots = True
    if reboots:
        return "reboot", {**kept, "ansible.builtin.set_fact": {REBOOT_FACT: True}}
    if not (handler and defer and module in SERVICE_MODULES):
        return None
    params = _params(args)
    unit = params.get("name") or params.get("service") or params.get("unit")
    if str(params.get("state", "")) != "restarted" or not unit:
        return None
    append = "{{ (" + RESTART_FACT + " | default([])) + [" + UNIT_VAR + "] }}"
    own = kept.get("vars")
    own_vars: dict[str, Any] = own if isinstance(own, dict) else {}
    return "restart", {
        **kept,
        "vars": {**own_vars, UNIT_VAR: unit},
        "ansible.builtin.set_fact": {RESTART_FACT: append},
    }


def _module_of(task: Mapping[str, Any]) -> tuple[str, object]:
    """The task's module (action) name and its arguments."""
    for key, value in task.items():
        name = str(key)
        if name in REBOOT_MODULES or name in SERVICE_MODULES or name in COMMAND_MODULES:
            args = value
            if isinstance(task.get("args"), dict):
                args = {**(value if isinstance(value, dict) else {}), **task["args"]}
            return name, args
    action = task.get("action") or task.get("local_action")
    if isinstance(action, str) and action.split():
        return action.split()[0], " ".join(action.split()[1:])
    if isinstance(action, dict) and "module" in action:
        return str(action["module"]), {k: v for k, v in action.items() if k != "module"}
    return "", None


def _params(args: object) -> dict[str, Any]:
    if isinstance(args, dict):
        return dict(args)
    if isinstance(args, str):  # free-form "name=x state=restarted"
        out: dict[str, Any] = {}
        try:
            words = shlex.split(args)
        except ValueError:
            return out
        for word in words:
            key, sep, value = word.partition("=")
            if sep:
                out[key] = value
        return out
    return {}


def _command_line(args: object) -> str:
    if isinstance(args, str):
        return args
    if isinstance(args, dict):
        if isinstance(args.get("cmd"), str):
            return str(args["cmd"])
        argv = args.get("argv")
        if isinstance(argv, list):
            return " ".join(str(a) for a in argv)
    return ""
