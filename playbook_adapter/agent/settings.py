"""The agent's inputs, read once from the pod environment (docs/node-pod-contract.md, "The pod").

Why one place: the node pod contract is a list of env vars and mounted paths; reading them in one
frozen object keeps the rest of the agent free of ``os.environ`` and lets tests build settings for
a temporary directory without touching the process environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

DEFAULT_PACKAGE_DIR = "/nodewright/package"
DEFAULT_VARS_FILE = "/etc/nodewright/vars/vars.json"
DEFAULT_CONFIG_DIR = "/etc/nodewright/config"
DEFAULT_SECRETS_DIR = "/etc/nodewright/secrets"
DEFAULT_LOG_DIR = "/var/log/nodewright"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
INTERRUPT_FLAG_DIR = "var/lib/nodewright/interrupts"
# Same retention as NodeWright's agent: enough to compare the last few runs, bounded on disk.
DEFAULT_KEEP_LOGS = 5
# A real reboot kills the agent well within this; if it is still alive, the reboot did not happen.
DEFAULT_REBOOT_WAIT_SECONDS = 300.0


class HostConnection(StrEnum):
    CHROOT = "chroot"
    NSENTER = "nsenter"


@dataclass(frozen=True, slots=True)
class AgentSettings:
    package_dir: Path
    vars_file: Path
    config_dir: Path
    secrets_dir: Path
    host_root: Path
    host_connection: HostConnection
    host_python: str
    cr: str
    package: str
    version: str
    previous_version: str
    node: str
    node_order: str
    resource_id: str
    log_dir: str  # host-relative
    termination_log: Path
    keep_logs: int
    reboot_command: str  # shell words; empty = real reboot through the host connection
    reboot_wait_seconds: float
    systemctl_command: str  # shell words replacing `systemctl` for interrupts; empty = real one
    gather_subset: str
    # Service restart handlers become requests (the controller restarts on a drained node) unless
    # the CR sets the package's interrupt itself; reboots are always deferred.
    defer_restarts: bool = False
    tags: tuple[str, ...] = ()  # the package's tags: run only tasks with one of them
    skip_tags: tuple[str, ...] = ()  # the package's skipTags

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AgentSettings:
        env = os.environ if env is None else env
        connection = env.get("NW_HOST_CONNECTION", HostConnection.CHROOT.value) or "chroot"
        return cls(
            package_dir=Path(env.get("NW_PACKAGE_DIR", DEFAULT_PACKAGE_DIR)),
            vars_file=Path(env.get("NW_VARS_FILE", DEFAULT_VARS_FILE)),
            config_dir=Path(env.get("NW_CONFIG_DIR", DEFAULT_CONFIG_DIR)),
            secrets_dir=Path(env.get("NW_SECRETS_DIR", DEFAULT_SECRETS_DIR)),
            host_root=Path(env.get("NW_HOST_ROOT", "/host")),
            host_connection=HostConnection(connection),
            host_python=env.get("NW_HOST_PYTHON", "/usr/bin/python3"),
            cr=env.get("NW_CR", ""),
            package=env.get("NW_PACKAGE", ""),
            version=env.get("NW_VERSION", ""),
            previous_version=env.get("NW_PREVIOUS_VERSION", ""),
            node=env.get("NW_NODE", ""),
            node_order=env.get("NW_NODE_ORDER", ""),
            resource_id=env.get("NW_RESOURCE_ID", ""),
            log_dir=env.get("NW_LOG_DIR", DEFAULT_LOG_DIR),
            termination_log=Path(env.get("NW_TERMINATION_LOG", DEFAULT_TERMINATION_LOG)),
            keep_logs=int(env.get("NW_KEEP_LOGS", str(DEFAULT_KEEP_LOGS))),
            reboot_command=env.get("NW_REBOOT_COMMAND", ""),
            reboot_wait_seconds=float(
                env.get("NW_REBOOT_WAIT_SECONDS", str(DEFAULT_REBOOT_WAIT_SECONDS))
            ),
            systemctl_command=env.get("NW_SYSTEMCTL_COMMAND", ""),
            gather_subset=env.get("NW_GATHER_SUBSET", "all"),
            defer_restarts=env.get("NW_DEFER_RESTARTS", "").lower() in {"1", "true", "yes"},
            tags=_tag_list(env.get("NW_TAGS", "")),
            skip_tags=_tag_list(env.get("NW_SKIP_TAGS", "")),
        )

    def host_path(self, host_relative: str) -> Path:
        """A path on the host as the agent sees it (under the host root mount)."""
        return self.host_root / host_relative.lstrip("/")


def _tag_list(text: str) -> tuple[str, ...]:
    """``NW_TAGS``/``NW_SKIP_TAGS``: comma-joined tag names (the CR validated each one)."""
    return tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
