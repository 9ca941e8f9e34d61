"""A local OCI registry for package images: Debian's ``docker-registry`` on 127.0.0.1.

Images persist in the cache (``<cache>/registry``) across sandboxes, so a package built once can be
pulled by later runs. Plain HTTP on loopback: podman needs ``--tls-verify=false`` for it.
"""

from __future__ import annotations

import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from nodewright_bridge.sandbox.binaries import cache_root
from nodewright_bridge.sandbox.processes import ManagedProcess, free_port, wait_until

REGISTRY_BINARY = "/usr/bin/docker-registry"
START_TIMEOUT_SECONDS = 30.0


class RegistryUnavailableError(RuntimeError):
    """docker-registry is not installed."""


def registry_binary() -> Path:
    found = shutil.which("docker-registry") or (
        REGISTRY_BINARY if Path(REGISTRY_BINARY).exists() else None
    )
    if found is None:
        raise RegistryUnavailableError(
            "docker-registry is not installed (Debian package docker-registry; run: make setup)"
        )
    return Path(found)


@dataclass
class Registry:
    """One registry process; ``host`` is what image names start with (``127.0.0.1:<port>``)."""

    directory: Path  # config and log
    storage: Path | None = None  # default: <cache>/registry
    port: int = 0
    process: ManagedProcess | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = registry_binary()
        storage = self.storage or cache_root() / "registry"
        storage.mkdir(parents=True, exist_ok=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        config = {
            "version": 0.1,
            "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
            "http": {"addr": self.host},
        }
        config_path = self.directory / "registry.yml"
        config_path.write_text(yaml.safe_dump(config))
        self.process = ManagedProcess(
            "docker-registry",
            [str(binary), "serve", str(config_path)],
            log_path=self.directory / "docker-registry.log",
        )
        process = self.process

        def ready() -> bool:
            if not process.alive():
                raise RuntimeError(f"docker-registry exited:\n{process.log_tail()}")
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as resp:
                return bool(resp.status == 200)

        wait_until(ready, timeout=START_TIMEOUT_SECONDS, what="docker-registry /v2/")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
