"""The lock file: every runtime dependency pinned to one version and one wheel hash.

Why: an image built from a commit must contain the same dependency set whoever builds it and
whenever. ``requirements.lock`` (at the repository root, committed) lists ``name==version
--hash=sha256:...`` for the project's runtime dependencies, resolved by pip for one platform
(its header names it). Images install from it with ``--require-hashes``; ``make venv`` uses its
versions as constraints, so the tests run the set the image ships. ``make lock`` (``nwb image
lock``) resolves it again after a change to the dependencies in pyproject.toml.

Guarantees: a wheelhouse downloaded for a lock is cached under
``<cache>/wheels/<lock digest>-<python>`` and re-used; pip checks every file against the lock's
hash. Caveats: one hash per pin, i.e. one platform (linux x86_64 wheels for the lock's Python);
another platform needs its own resolution.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from nodewright_bridge.sandbox.binaries import cache_root
from playbook_adapter.imaging import ImageError

LOCK_NAME = "requirements.lock"
PROJECT = "nodewright-bridge"
_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})\s*$")
_HEADER_PYTHON = re.compile(r"^# python: (3\.\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sha256: str


@dataclass(frozen=True)
class Lock:
    python: str  # "3.11": the Python the wheels are for
    pins: tuple[Pin, ...]
    digest: str  # sha256 of the file's text

    def version_of(self, name: str) -> str | None:
        wanted = normalize(name)
        return next((p.version for p in self.pins if normalize(p.name) == wanted), None)


def normalize(name: str) -> str:
    """PEP 503 name normalization (``PyYAML`` == ``pyyaml``, ``typing_extensions`` ==
    ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> Lock:
    """Read a lock file's text; a line that is neither a comment nor a pin is an error."""
    pins = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _PIN.match(line)
        if match is None:
            raise ImageError(
                f"{LOCK_NAME} line {number}: expected 'name==version --hash=sha256:<hex>', "
                f"got {line!r}; regenerate it with `make lock`"
            )
        pins.append(Pin(*match.groups()))
    found = _HEADER_PYTHON.search(text)
    if found is None:
        raise ImageError(f"{LOCK_NAME}: no '# python: 3.N' header; regenerate it with `make lock`")
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Lock(python=found.group(1), pins=tuple(pins), digest=digest)


def load_lock(path: Path) -> Lock:
    if not path.is_file():
        raise ImageError(f"{path}: missing; create it with `make lock`")
    return parse_lock(path.read_text(encoding="utf-8"))


def resolve_lock(project_dir: Path) -> str:
    """The text of a fresh lock for ``project_dir``: pip resolves its runtime dependencies as if
    nothing were installed (``--dry-run --report``), for this host's Python and platform."""
    with tempfile.TemporaryDirectory(prefix="nwb-lock-") as tmp:
        report_path = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        cmd += ["--dry-run", "--ignore-installed", "--only-binary=:all:"]
        cmd += ["--report", str(report_path), str(project_dir)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ImageError("resolving the lock failed: " + proc.stderr.strip()[-800:])
        report = json.loads(report_path.read_text())
    lines = []
    for item in report.get("install", []):
        name = item["metadata"]["name"]
        if normalize(name) == PROJECT:
            continue
        hashes = (item.get("download_info", {}).get("archive_info") or {}).get("hashes") or {}
        if "sha256" not in hashes:
            raise ImageError(f"pip reported no sha256 for {name}; cannot lock it")
        lines.append(f"{name}=={item['metadata']['version']} --hash=sha256:{hashes['sha256']}")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    header = [
        "# Runtime dependencies of nodewright-bridge, one wheel each (generated: `make lock`).",
        "# The controller image installs exactly these with --require-hashes; `make venv` uses",
        "# their versions as constraints.",
        f"# python: {python}",
        f"# platform: {sys.platform} {platform.machine()}",
    ]
    return "\n".join([*header, *sorted(lines, key=str.lower)]) + "\n"


def constraints_text(lock: Lock) -> str:
    """The lock as a pip constraints file (versions only: constraints cannot carry hashes)."""
    return "".join(f"{p.name}=={p.version}\n" for p in lock.pins)


def _platform_args(python: str) -> list[str]:
    machine = platform.machine()
    args = ["--only-binary=:all:", "--implementation", "cp", "--python-version", python]
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(17, 37)]
    tags += [f"manylinux2014_{machine}", f"linux_{machine}"]
    for tag in tags:
        args += ["--platform", tag]
    return args


def wheelhouse(lock_path: Path, *, cache: Path | None = None) -> Path:
    """A directory with every wheel of the lock (hash-checked) and pip's own wheel (the build
    runs pip from it); downloaded once per lock digest and Python."""
    lock = load_lock(lock_path)
    pip_version = metadata.version("pip")
    root = (cache or cache_root()) / "wheels"
    target = root / f"{lock.digest[:16]}-py{lock.python}-pip{pip_version}"
    if (target / ".complete").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=root))
    try:
        base = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
        base += ["--no-deps", "--dest", str(work), *_platform_args(lock.python)]
        for args in (["--require-hashes", "-r", str(lock_path)], [f"pip=={pip_version}"]):
            proc = subprocess.run([*base, *args], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise ImageError("downloading the locked wheels failed: " + proc.stderr[-800:])
        (work / ".complete").write_text(lock.digest + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
