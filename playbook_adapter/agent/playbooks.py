"""The private data directory of one agent run: playbooks, inventory, vars files, Ansible env.

Why generated: the role stays unchanged (teams keep maintaining it as a role); the agent writes a
small playbook per stage that runs one of its task files with ``include_role`` + ``tasks_from``,
and chains them in ``site.yml`` so all requested stages run in ONE ansible-playbook process (one
interpreter start, one collection scan, facts gathered once by the first stage and kept in a
jsonfile fact cache in the data dir). A host that fails in a stage takes no part in the later
stages, so they show as skipped. A playbook entry (molecule's ``verify.yml``) is imported after its
stage's marker play; the CR's vars reach it as inventory host vars, as molecule's do.

Host connection (``NW_HOST_CONNECTION``):
- ``chroot``: ``community.general.chroot`` into ``NW_HOST_ROOT``. Files and commands act on the
  host's filesystem; nothing sees the host's systemd (the sandbox default; fine for files,
  sysctl.d, modprobe.d, grub).
- ``nsenter``: the same connection plugin with ``chroot_exe`` replaced by a two-line wrapper that
  drops the chroot directory and runs ``nsenter -t 1 -m -u -i -n -p -- <cmd>``: every module and
  every file transfer (``dd``) runs in PID 1's mount/UTS/IPC/net/PID namespaces, i.e. on the real
  host, where ``systemctl`` talks to the host's systemd (inside a chroot it refuses to act). Chosen
  over an ``ansible_python_interpreter`` wrapper because file transfers (copy/template) also go
  through the wrapper, so no path has to exist in both the container and the host. Needs
  ``hostPID`` and privileges (the node pod has both); never used against this machine in tests.

Tags (``NW_TAGS``/``NW_SKIP_TAGS``, the package's ``tags``/``skipTags``) go to ansible-playbook
as ``--tags``/``--skip-tags`` and so select the role's tasks by their own tags, as they would in
``ansible-playbook --tags``. Tags on an ``include_role`` task apply to the include itself only
(not to the tasks it includes, unless ``apply`` says so), so the include must itself be selected,
or nothing of the role runs: it is tagged ``always`` - without ``apply``, so the role's tasks keep
only their own tags. When ``skipTags`` holds ``always`` or ``tagged``, which would skip that
include, it carries the tags that are selected and not skipped instead, or none
(``include_tags``); every task Ansible would run then still runs.

Disruptive actions (reboots, and service restarts when the controller asks) are rewritten into
requests in a private copy of the role (``deferring``). A ``config`` stage of a package without a
config task file runs its apply task file, unless apply or upgrade already ran in this run: a
role reads its vars in ``tasks/main.yml``, so re-running it is how new vars are applied. Handlers
a previous attempt left owed (``handlers``) are notified again right after the role's tasks in
the first apply/upgrade/config play, so a failure between a change and its handler is repaired.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from playbook_adapter.agent import deferring, handlers
from playbook_adapter.agent.events import STAGE_PLAY_PREFIX
from playbook_adapter.agent.settings import AgentSettings, HostConnection
from playbook_adapter.manifest import AgentStage, EntryKind, PackageManifest, StageEntry

# Stages whose play may carry the re-notify of owed handlers (they run the role's own tasks).
RENOTIFY_STAGES = (AgentStage.APPLY, AgentStage.UPGRADE, AgentStage.CONFIG)
RENOTIFY_TASK_NAME = "nodewright: run handlers an earlier attempt left owed"
NSENTER_WRAPPER = """#!/bin/sh
# chroot_exe stand-in: $1 is the chroot directory; act in PID 1's namespaces instead.
shift
exec nsenter -t 1 -m -u -i -n -p -- "$@"
"""
# Tags our include_role task when "always" is skipped and no --tags are given (include_tags).
INCLUDE_TAG = "nodewright-stage"
# Remote temp dir inside the host root; private to root, removed by Ansible after each module.
REMOTE_TMP = "/tmp/.nwb-ansible"


@dataclass(frozen=True, slots=True)
class PreparedRun:
    data_dir: Path
    playbook: str
    inventory: dict[str, Any]
    envvars: dict[str, str]
    stages: list[AgentStage]  # the stages that have an entry (a play) in this package
    deferred: tuple[str, ...]  # disruptive tasks/handlers turned into requests
    renotified: tuple[str, ...]  # owed handlers notified again in this run
    dropped: tuple[str, ...]  # owed handlers this version of the role no longer has


def prepare(
    data_dir: Path,
    *,
    settings: AgentSettings,
    manifest: PackageManifest,
    role: Path,
    stages: list[AgentStage],
    values: Mapping[str, Any],
    secrets: Mapping[str, Any],
    owed_handlers: Sequence[str] = (),
) -> PreparedRun:
    """Write everything ansible-runner needs under ``data_dir`` (created 0700)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    project = data_dir / "project"
    for sub in (project, data_dir / "facts", data_dir / "tmp", data_dir / "home"):
        sub.mkdir(mode=0o700, exist_ok=True)
    (data_dir / "ansible.cfg").write_text("", encoding="utf-8")  # ignore any stray ansible.cfg

    run = deferring.roles_for_run(
        role,
        settings.package_dir / "roles",
        data_dir / "rewritten",
        defer_restarts=settings.defer_restarts,
    )
    run_role = run.role
    known = _handler_names(run_role, run.roles_dir, settings.package_dir / "roles")
    renotify = tuple(n for n in owed_handlers if handlers.reachable(n, known))
    dropped = tuple(n for n in owed_handlers if n not in renotify)
    vars_file = _private_json(data_dir / "vars.json", values)
    secrets_file = _private_json(data_dir / "secrets.json", secrets)
    common_vars = {
        "nodewright_package": manifest.name,
        "nodewright_version": manifest.version,
        "nodewright_previous_version": settings.previous_version,
        "nodewright_node": settings.node,
        "nodewright_node_order": settings.node_order,
        "nodewright_config_dir": str(settings.config_dir),
    }

    plays: list[dict[str, Any]] = []
    with_entry: list[AgentStage] = []
    kinds: set[EntryKind] = set()
    for stage in stages:
        entry = _entry_for(manifest, stage, ran=with_entry)
        if entry is None:
            continue
        kinds.add(entry.kind)
        first = not with_entry
        with_entry.append(stage)
        play: dict[str, Any] = {
            "name": f"{STAGE_PLAY_PREFIX}{stage}",
            "hosts": "all",
            "gather_facts": first,
            "vars_files": [str(vars_file), str(secrets_file)],
            "vars": {**common_vars, "nodewright_stage": str(stage)},
            "tasks": [],
        }
        if first:
            play["gather_subset"] = [s for s in settings.gather_subset.split(",") if s]
        if entry.kind is EntryKind.TASKS:
            include: dict[str, Any] = {
                "name": f"{manifest.name} {stage}",
                "ansible.builtin.include_role": {
                    "name": str(run_role),
                    "tasks_from": _tasks_from(entry.file),
                },
            }
            gate = include_tags(settings.tags, settings.skip_tags)
            if gate:
                include["tags"] = gate
            play["tasks"].append(include)
            if renotify and stage in RENOTIFY_STAGES and not _renotified(plays):
                # Selected exactly when the include is, so tags never skip the owed handlers.
                play["tasks"].append(
                    {**renotify_task(renotify), **({"tags": gate} if gate else {})}
                )
            plays.append(play)
        else:
            plays.append(play)
            plays.append(
                {
                    "ansible.builtin.import_playbook": str(run_role / entry.file),
                    "vars": {"nodewright_stage": str(stage)},
                }
            )
    (project / "site.yml").write_text(
        yaml.safe_dump(plays, sort_keys=False, width=1000), encoding="utf-8"
    )

    host_vars: dict[str, Any] = {}
    if EntryKind.PLAYBOOK in kinds:
        # A playbook entry (molecule verify) has its own plays, which see neither the marker
        # play's vars nor its vars_files. As molecule passes scenario vars through the
        # inventory, the CR's vars reach it as host vars (the playbook's own vars still win).
        host_vars.update({**common_vars, **values, **secrets})
    host_vars |= {
        "ansible_connection": "community.general.chroot",
        "ansible_host": str(settings.host_root),
        "ansible_python_interpreter": settings.host_python,
    }
    if settings.host_connection is HostConnection.NSENTER:
        wrapper = data_dir / "nsenter-exe"
        wrapper.write_text(NSENTER_WRAPPER, encoding="utf-8")
        wrapper.chmod(0o700)
        host_vars["ansible_chroot_exe"] = str(wrapper)
    inventory = {"all": {"hosts": {settings.node or "node": host_vars}}}

    collections = [settings.package_dir / "collections", *_enclosing_collection_roots(role)]
    roles_path = [settings.package_dir / "roles", role.parent]
    if run.roles_dir is not None:
        roles_path.insert(0, run.roles_dir)  # rewritten dependencies shadow the bundled ones
    envvars = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "ANSIBLE_CONFIG": str(data_dir / "ansible.cfg"),
        "ANSIBLE_HOME": str(data_dir / "home"),
        "ANSIBLE_LOCAL_TEMP": str(data_dir / "tmp"),
        "ANSIBLE_REMOTE_TMP": REMOTE_TMP,
        "ANSIBLE_ROLES_PATH": os.pathsep.join(str(p) for p in roles_path),
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(str(p) for p in collections),
        "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.jsonfile",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(data_dir / "facts"),
        "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "86400",
        "ANSIBLE_GATHERING": "implicit",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
    }
    return PreparedRun(
        data_dir=data_dir,
        playbook="site.yml",
        inventory=inventory,
        envvars=envvars,
        stages=with_entry,
        deferred=run.deferred,
        renotified=renotify if _renotified(plays) else (),
        dropped=dropped,
    )


def renotify_task(names: Sequence[str]) -> dict[str, Any]:
    """A task that reports changed and notifies ``names``: Ansible then runs them at play end."""
    return {
        "name": RENOTIFY_TASK_NAME,
        "ansible.builtin.debug": {"msg": "notifying again: " + ", ".join(names)},
        "changed_when": True,
        "notify": list(names),
    }


def _renotified(plays: Sequence[Mapping[str, Any]]) -> bool:
    return any(
        isinstance(task, Mapping) and task.get("name") == RENOTIFY_TASK_NAME
        for play in plays
        for task in play.get("tasks") or ()
    )


def _entry_for(
    manifest: PackageManifest, stage: AgentStage, *, ran: Sequence[AgentStage]
) -> StageEntry | None:
    """The stage's entry; a config stage without one re-runs the apply entry (new vars)."""
    entry = manifest.entry(stage)
    if entry is not None or stage is not AgentStage.CONFIG:
        return entry
    if AgentStage.APPLY in ran or AgentStage.UPGRADE in ran:
        return None  # the role just ran with these very vars
    return manifest.entry(AgentStage.APPLY)


def _handler_names(role: Path, *roles_dirs: Path | None) -> set[str]:
    """Names and listen topics of the handlers the run can reach (role and bundled roles)."""
    roots = [role]
    for directory in roles_dirs:
        if directory is not None and directory.is_dir():
            roots += sorted(p for p in directory.iterdir() if p.is_dir())
    names: set[str] = set()
    for root in roots:
        for name in ("main.yml", "main.yaml"):
            path = root / "handlers" / name
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(data, list):
                names |= handlers.handler_names(h for h in data if isinstance(h, dict))
    return names


def include_tags(tags: Sequence[str], skip_tags: Sequence[str]) -> list[str]:
    """Tags for our ``include_role`` task so that it runs whenever a task of the role would.

    Ansible checks ``--skip-tags`` in order: ``all`` (only ``always`` tasks survive, unless
    ``always`` is skipped too), then the tags named, then ``tagged``. ``always`` is selected by
    any ``--tags``. When ``always`` is itself skipped, the selected tags that are not skipped do
    the job, or under the default ``--tags all`` a tag of our own (an untagged include would
    fall to ``--skip-tags untagged``). ``--skip-tags tagged`` skips any tagged include; an
    untagged one runs exactly when untagged tasks can, and only those can run then.
    """
    if "all" in skip_tags:
        return ["always"]
    if "tagged" in skip_tags:
        return []
    if "always" not in skip_tags:
        return ["always"]
    if not tags:
        return [INCLUDE_TAG]
    return [t for t in tags if t not in skip_tags]


def _tasks_from(file: str) -> str:
    parts = Path(file).parts
    if parts and parts[0] == "tasks":
        return str(Path(*parts[1:]))
    return str(Path("..", file))  # a task file elsewhere in the role, relative to tasks/


def _private_json(path: Path, data: Mapping[str, Any]) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(dict(data), handle)
    return path


def _enclosing_collection_roots(role: Path) -> list[Path]:
    """For .../ansible_collections/ns/coll/roles/r, the directory holding ansible_collections."""
    for parent in role.parents:
        if parent.name == "ansible_collections":
            return [parent.parent]
    return []
