"""Finding (and if needed building) the control-plane binaries the sandbox runs.

Lookup order per binary, following envtest's conventions and then ours:
1. ``TEST_ASSET_<NAME>`` (name upper-cased, each run of other characters turned into ``_``), e.g.
   ``TEST_ASSET_KUBE_APISERVER``, ``TEST_ASSET_ETCD``, ``TEST_ASSET_KUBE_CONTROLLER_MANAGER``;
2. ``$KUBEBUILDER_ASSETS/<name>``;
3. our build cache ``<cache>/bin/k8s-<ver>-etcd-<ver>/<name>`` (made by build-control-plane.sh);
4. ``PATH``.
Unlike envtest, a candidate counts only if it exists, is executable and answers ``--version``; the
version is logged. The first candidate that works wins.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

K8S_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
# What the sandbox needs; helm is optional (only the Helm chart tests use it).
REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
OPTIONAL = ("helm",)
BUILD_SCRIPT = Path(__file__).with_name("build-control-plane.sh")
# --version is instant for these static binaries; a cold page cache on a box still busy tearing
# down a 5,000-node sandbox once took longer than 20 s (and the bench then failed to start).
VERSION_TIMEOUT_SECONDS = 90.0


class BinaryNotFoundError(Exception):
    """A required binary is missing and could not be built."""


@dataclass(frozen=True, slots=True)
class Binary:
    name: str
    path: Path
    version: str
    source: str  # which lookup step found it: TEST_ASSET_*, KUBEBUILDER_ASSETS, cache, PATH


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """``$NWB_CACHE_DIR`` or ``${XDG_CACHE_HOME:-~/.cache}/nodewright-bridge``."""
    env = os.environ if env is None else env
    if env.get("NWB_CACHE_DIR"):
        return Path(env["NWB_CACHE_DIR"])
    xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "nodewright-bridge"


def cache_bin_dir(env: Mapping[str, str] | None = None) -> Path:
    return cache_root(env) / "bin" / f"k8s-{K8S_VERSION}-etcd-{ETCD_VERSION}"


def asset_env_name(name: str) -> str:
    """envtest's variable name for a binary: ``kube-apiserver`` -> ``TEST_ASSET_KUBE_APISERVER``."""
    upper = re.sub(r"[^A-Z0-9]+", "_", name.upper()).lstrip("0123456789")
    return f"TEST_ASSET_{upper}"


def candidates(name: str, env: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """Where to look for ``name``, in order, as (source, path) pairs. Nothing is checked yet."""
    env = os.environ if env is None else env
    found: list[tuple[str, Path]] = []
    asset = env.get(asset_env_name(name))
    if asset:
        found.append((asset_env_name(name), Path(asset)))
    if env.get("KUBEBUILDER_ASSETS"):
        found.append(("KUBEBUILDER_ASSETS", Path(env["KUBEBUILDER_ASSETS"]) / name))
    found.append(("cache", cache_bin_dir(env) / name))
    on_path = shutil.which(name, path=env.get("PATH", os.defpath))
    if on_path:
        found.append(("PATH", Path(on_path)))
    return found


def probe_version(path: Path) -> str | None:
    """The first line ``path --version`` prints, or None if it is not a working executable."""
    if not path.is_file() or not os.access(path, os.X_OK):
        return None
    # kubectl and helm have a version subcommand instead of a flag.
    args = {"kubectl": ["version", "--client"], "helm": ["version", "--short"]}.get(
        path.name, ["--version"]
    )
    try:
        done = subprocess.run(
            [str(path), *args],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("%s does not answer --version: %s", path, exc)
        return None
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip()[-300:]
        log.warning("%s --version exited %d: %s", path, done.returncode, why)
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if lines else "unknown"


def find(name: str, env: Mapping[str, str] | None = None) -> Binary | None:
    """The first working candidate for ``name``, or None."""
    for source, path in candidates(name, env):
        version = probe_version(path)
        if version is not None:
            log.info("using %s %s (%s: %s)", name, version, source, path)
            return Binary(name=name, path=path, version=version, source=source)
        log.debug("skipping %s candidate %s (%s): not a working executable", name, path, source)
    return None


def find_all(
    names: tuple[str, ...] = REQUIRED, env: Mapping[str, str] | None = None
) -> dict[str, Binary | None]:
    return {name: find(name, env) for name in names}


def ensure_binaries(
    *,
    progress: Callable[[str], None] | None = None,
    with_helm: bool = True,
    env: Mapping[str, str] | None = None,
) -> dict[str, Binary]:
    """Locate the control-plane binaries, building the missing ones into the cache first.

    ``progress`` receives each line the build script prints (it can take 20-40 minutes cold).
    Raises ``BinaryNotFoundError`` when something required is still missing afterwards.
    """
    wanted = REQUIRED + (OPTIONAL if with_helm else ())
    found = find_all(wanted, env)
    missing = [name for name in REQUIRED if found[name] is None]
    if with_helm and found["helm"] is None:
        missing.append("helm")
    if missing:
        if progress is not None:
            progress(f"building {', '.join(missing)} (cached after the first time)")
        run_build_script(progress=progress, with_helm=with_helm, env=env)
        found = find_all(wanted, env)
    still = [name for name in REQUIRED if found[name] is None]
    if still:
        raise BinaryNotFoundError(
            f"missing after build: {', '.join(still)}; see {BUILD_SCRIPT} or set KUBEBUILDER_ASSETS"
        )
    return {name: binary for name, binary in found.items() if binary is not None}


def run_build_script(
    *,
    progress: Callable[[str], None] | None = None,
    with_helm: bool = True,
    env: Mapping[str, str] | None = None,
) -> Path:
    """Run build-control-plane.sh, streaming its output lines to ``progress``; returns its dir."""
    run_env = dict(os.environ if env is None else env)
    run_env["WITH_HELM"] = "1" if with_helm else "0"
    proc = subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=run_env,
    )
    assert proc.stdout is not None  # we asked for a pipe
    last = ""
    for line in proc.stdout:
        last = line.rstrip("\n")
        if progress is not None and last:
            progress(last)
    code = proc.wait()
    if code != 0:
        raise BinaryNotFoundError(f"{BUILD_SCRIPT.name} failed with exit code {code}: {last}")
    return cache_bin_dir(env)
