"""Run a package's stages against a root filesystem, isolated, with the node agent's own code.

Why: the role author's dev loop (``nwb package test``) and our tests must exercise exactly what a
node runs (``nwb-agent run``), but never against this machine. A chroot alone does not isolate
mounts or sysctls (a hardening role's sysctl tasks through a chroot change the machine's own
kernel), so the agent runs under ``isolation.run_isolated`` (own mount/PID/UTS/IPC namespaces, a
per-node ``/proc/sys`` stand-in, private ``/sys``, ``/dev``, ``/run``) with the root as its
``NW_HOST_ROOT``.

A role directory without ``nodewright-package.yaml`` is tested with the manifest ``nwb package
init`` would write (nothing is written into the role).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lifecycle.results import AgentResult, parse_termination_message
from nodewright_bridge.sandbox import isolation, rootfs
from playbook_adapter import introspection
from playbook_adapter.manifest import MANIFEST_FILE

logger = logging.getLogger(__name__)

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_BOOT_ID = "package-test-boot-1"
# Version of a role under test that has none yet (no meta version, galaxy.yml or git tag).
DEV_VERSION = "0.0.0-dev"
# A stage that needs longer than this on a test root is stuck (a prompt, a network wait).
RUN_TIMEOUT_SECONDS = 1800.0


@dataclass(frozen=True, slots=True)
class RoleTestRun:
    exit_code: int
    result: AgentResult
    output: str  # the agent's stdout+stderr when captured, else ""


def state_dir_for(root: Path) -> Path:
    """Isolation state (``/proc/sys`` stand-in, ``/sys``, boot id) kept per root directory."""
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return rootfs.cache_dir() / "package-test" / digest


def release_root(root: Path, state: Path | None = None) -> None:
    """Power the test node off: unmount the per-boot file systems the runs mounted (its ``/run``,
    ``/tmp``, ``/proc/sys`` and ``/sys``); the next run on ``root`` boots it afresh (same id)."""
    isolation.release_node(root, state or state_dir_for(root))


@contextmanager
def scratch_root(keep: bool = False) -> Iterator[Path]:
    """A throw-away copy-on-write root over the cached Debian base."""
    base = rootfs.ensure_base_rootfs()
    work = Path(tempfile.mkdtemp(prefix="nwb-package-test-"))
    node = rootfs.mount_node_root(base, work / "node")
    try:
        yield node.path
    finally:
        if not keep:
            release_root(node.path)
            shutil.rmtree(state_dir_for(node.path), ignore_errors=True)
            rootfs.unmount_node_root(node, remove=True)
            shutil.rmtree(work, ignore_errors=True)


def run_stages(
    role_or_package: Path,
    root: Path,
    stages: str,
    *,
    values: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    state: Path | None = None,
    capture: bool = False,
    out: IO[bytes] | None = None,
    check: bool = False,
) -> RoleTestRun:
    """``nwb-agent run --stages STAGES`` (``--check`` with ``check``: what would change, nothing
    changed) isolated on ``root``; see the module docstring."""
    return _agent(
        role_or_package,
        root,
        ["run", *(["--check"] if check else []), "--stages", stages],
        values=values,
        secrets=secrets,
        extra_env=extra_env,
        state=state,
        capture=capture,
        out=out,
    )


def run_interrupt(
    role_or_package: Path,
    root: Path,
    args: list[str],
    *,
    extra_env: Mapping[str, str] | None = None,
    state: Path | None = None,
) -> RoleTestRun:
    """``nwb-agent interrupt ARGS`` isolated on ``root`` (output captured)."""
    return _agent(
        role_or_package, root, ["interrupt", *args], extra_env=extra_env, state=state, capture=True
    )


def _agent(
    role_or_package: Path,
    root: Path,
    args: list[str],
    *,
    values: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    state: Path | None = None,
    capture: bool = False,
    out: IO[bytes] | None = None,
) -> RoleTestRun:
    root = root.resolve()
    state = state or state_dir_for(root)
    with tempfile.TemporaryDirectory(prefix="nwb-agent-io-") as scratch_text:
        scratch = Path(scratch_text)
        package_dir = _package_dir(role_or_package.resolve(), scratch)
        (scratch / "vars.json").write_text(json.dumps(dict(values or {})), encoding="utf-8")
        secret_dir = scratch / "secrets" / "package-test"
        secret_dir.mkdir(parents=True)
        for key, value in (secrets or {}).items():
            (secret_dir / key).write_text(value, encoding="utf-8")
        termination = scratch / "termination-log"
        env = {
            "PATH": f"{Path(sys.executable).parent}:{BASE_PATH}",
            "LANG": "C.UTF-8",
            "NW_PACKAGE_DIR": str(package_dir),
            "NW_VARS_FILE": str(scratch / "vars.json"),
            "NW_SECRETS_DIR": str(scratch / "secrets"),
            "NW_CONFIG_DIR": str(scratch / "config"),
            "NW_HOST_ROOT": str(root),
            "NW_HOST_CONNECTION": "chroot",
            "NW_TERMINATION_LOG": str(termination),
            "NW_CR": "package-test",
            "NW_NODE": "package-test",
            "NW_RESOURCE_ID": "package-test",
            **dict(extra_env or {}),
        }
        boot_id = DEFAULT_BOOT_ID
        if (state / isolation.BOOT_ID_FILE).is_file():
            boot_id = (state / isolation.BOOT_ID_FILE).read_text().strip() or DEFAULT_BOOT_ID
        sink: int | IO[bytes] | None = subprocess.PIPE if capture else out
        proc = isolation.run_isolated(
            root,
            state,
            ["nwb-agent", *args],
            env=env,
            boot_id=boot_id,
            stdout=sink,
            stderr=subprocess.STDOUT if capture else None,
        )
        try:
            output, _ = proc.communicate(timeout=RUN_TIMEOUT_SECONDS)
        except BaseException:
            # A timeout, or Ctrl-C in `nwb package test`: the agent runs in its own session, so
            # nothing else stops it; left alone it would keep acting on the root (and hold a
            # scratch root's mount) after we return.
            isolation.stop_isolated(proc)
            raise
        text = termination.read_text(encoding="utf-8") if termination.is_file() else ""
        return RoleTestRun(
            exit_code=proc.returncode,
            result=parse_termination_message(text),
            output=output.decode("utf-8", "replace") if output else "",
        )


def _package_dir(path: Path, scratch: Path) -> Path:
    if (path / MANIFEST_FILE).is_file():
        return path
    manifest = introspection.introspect_role(path, fallback_version=DEV_VERSION)
    manifest = manifest.model_copy(update={"role": str(path)})
    package = scratch / "package"
    package.mkdir()
    (package / MANIFEST_FILE).write_text(manifest.to_yaml(), encoding="utf-8")
    return package
