"""Build, push and inspect NodeWright package images (OCI) from a role directory.

Why this shape: a package build must take seconds, not minutes, because role authors rebuild on
every change. So the image is built in two steps, each a plain Containerfile generated here:

1. **Agent base** (``localhost/nwb-agent-base:<key>``, cached): the base image (a public Python slim
   image for users; here one imported from the sandbox rootfs, since no registry is reachable) plus
   a venv at ``/opt/nwb`` with the agent's runtime dependencies, installed offline from a wheelhouse
   the host's pip downloads for the base's Python version. The key hashes the base image id and the
   pinned requirements, so it is rebuilt only when one of them changes.
2. **Package** (``FROM`` the agent base): the agent's code (``lifecycle`` and ``playbook_adapter``,
   a few hundred KB), then the package tree at ``/nodewright/package``: the manifest, the role and
   its role dependencies under ``roles/``, and only the collections the manifest lists under
   ``collections/ansible_collections/`` (see docs/node-pod-contract.md, "Package image").

The engine is whatever the user has: podman, else buildah, else docker with a reachable daemon
(override with ``NWB_CONTAINER_ENGINE``). Everything goes through the engine's CLI; no daemon API.

Guarantees: the manifest inside the image names ``roles/<role>`` as its role path, so the agent
finds the role from ``NW_PACKAGE_DIR`` alone. Caveats: the agent base is keyed on what the host
venv has installed; a different host may build a different (but equivalent) agent base.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from playbook_adapter.errors import BadInputError, ManifestError, PackageError
from playbook_adapter.manifest import MANIFEST_FILE, PackageManifest, load_manifest, parse_manifest

logger = logging.getLogger(__name__)

DEFAULT_BASE_IMAGE = "docker.io/library/python:3.11-slim"
DEFAULT_REPOSITORY = "localhost/nodewright"
PACKAGE_ROOT = "/nodewright/package"
AGENT_PREFIX = "/opt/nwb"
AGENT_BASE_REPOSITORY = "localhost/nwb-agent-base"
LABEL_PREFIX = "bridge.nodewright.io/"

# The agent never needs the controller's Kubernetes client, metrics or file watching.
_NOT_NEEDED_IN_IMAGE = frozenset({"kubernetes", "prometheus-client", "watchfiles"})
# The agent's Python packages (the controller, nodewright_bridge, stays out of the image).
_AGENT_PACKAGES = ("lifecycle", "playbook_adapter")
# Collections the agent itself needs on every node, whatever the role uses (host connections).
AGENT_COLLECTIONS = ("community.general",)
# Parts of a collection or role that never run on a node.
_IGNORED = shutil.ignore_patterns(
    ".git", ".github", "__pycache__", "*.pyc", ".tox", ".cache", "tests", "docs", "changelogs"
)
_ROLE_IGNORED = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".tox", ".cache")


class ImageError(PackageError):
    """The container engine failed (build, push, inspect); the CLI exits 1."""


@dataclass(frozen=True)
class Engine:
    """A container engine CLI: ``name`` is podman, buildah or docker; ``argv`` runs it."""

    name: str
    argv: tuple[str, ...]

    def run(
        self, args: Sequence[str], *, check: bool = True, capture: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``engine args``; raise ImageError with the engine's stderr when ``check`` fails."""
        cmd = [*self.argv, *args]
        logger.debug("running %s", " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=capture, text=True, check=False)
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
            raise ImageError(
                f"{self.name} {args[0]} failed ({proc.returncode}): " + " | ".join(detail)
            )
        return proc

    def image_exists(self, image: str) -> bool:
        """Whether ``image`` is present in local storage."""
        if self.name == "buildah":
            args = ["inspect", "--type", "image", image]
        else:
            args = ["image", "inspect", image]
        return self.run(args, check=False).returncode == 0


def detect_engine(preferred: str | None = None) -> Engine:
    """The container engine to use: ``preferred`` or ``$NWB_CONTAINER_ENGINE``, else the first of
    podman, buildah, docker (docker only when its daemon answers)."""
    wanted = preferred or os.environ.get("NWB_CONTAINER_ENGINE") or ""
    candidates = [wanted] if wanted else ["podman", "buildah", "docker"]
    for name in candidates:
        path = shutil.which(name)
        if path is None:
            continue
        if name == "docker":
            probe = subprocess.run([path, "info"], capture_output=True, check=False)
            if probe.returncode != 0:
                continue
        return Engine(name=name, argv=(path,))
    tried = ", ".join(candidates)
    raise ImageError(f"no usable container engine found (tried {tried}); install podman")


# --------------------------------------------------------------------------------------------
# Image references
# --------------------------------------------------------------------------------------------


def split_reference(image: str) -> tuple[str, str | None]:
    """``host:5000/a/b:1.0`` -> (``host:5000/a/b``, ``1.0``); no tag -> (image, None)."""
    if "@" in image:
        return image.split("@", 1)[0], None
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon + 1 :]
    return image, None


def package_reference(manifest: PackageManifest, tag: str | None) -> str:
    """The image a package build produces: ``--tag`` (its tag defaults to the package version)
    or ``localhost/nodewright/<name>:<version>``."""
    if not tag:
        return f"{DEFAULT_REPOSITORY}/{manifest.name}:{manifest.version}"
    repository, image_tag = split_reference(tag)
    return f"{repository}:{image_tag or manifest.version}"


# --------------------------------------------------------------------------------------------
# Base image from a root filesystem (no registry needed)
# --------------------------------------------------------------------------------------------

# Documentation, manuals and apt's caches are dead weight in an image.
_ROOTFS_EXCLUDES = (
    "./usr/share/doc/*",
    "./usr/share/man/*",
    "./usr/share/info/*",
    "./usr/share/locale/*",
    "./var/cache/apt/*",
    "./var/lib/apt/lists/*",
    "./proc/*",
    "./sys/*",
    "./dev/*",
    "./run/*",
    "./tmp/*",
)


def import_rootfs(engine: Engine, rootfs: Path, image: str) -> str:
    """Import a root filesystem directory as an image (``tar | <engine> import``); return its id.

    This is how a base image is made where no registry can be reached: the sandbox's debootstrap
    rootfs (with ``python3``) becomes ``localhost/nwb-base:<key>``.
    """
    if engine.name == "buildah":
        raise ImageError("importing a rootfs needs podman or docker (buildah has no import)")
    if not (rootfs / "usr" / "bin").is_dir():
        raise BadInputError(f"{rootfs}: not a root filesystem (no usr/bin)")
    tar_cmd = ["tar", "-C", str(rootfs), "--numeric-owner"]
    tar_cmd += [f"--exclude={pattern}" for pattern in _ROOTFS_EXCLUDES]
    tar_cmd += ["-c", "."]
    changes = ["--change", 'CMD ["/bin/sh"]', "--change", "ENV LANG=C.UTF-8"]
    with subprocess.Popen(tar_cmd, stdout=subprocess.PIPE) as tar:
        proc = subprocess.run(
            [*engine.argv, "import", *changes, "-", image],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            check=False,
        )
        if tar.stdout is not None:
            tar.stdout.close()
        tar_rc = tar.wait()
    if tar_rc != 0 or proc.returncode != 0:
        raise ImageError(f"importing {rootfs} failed: tar rc={tar_rc}, {proc.stderr.strip()}")
    return image_id(engine, image)


def ensure_rootfs_image(engine: Engine, rootfs: Path, image: str) -> str:
    """Import ``rootfs`` as ``image`` unless that tag exists already; return the image id.

    Callers put the rootfs cache key in the tag, so a cached base keeps its id and the agent
    base built on it stays cached too.
    """
    if engine.image_exists(image):
        return image_id(engine, image)
    return import_rootfs(engine, rootfs, image)


def image_id(engine: Engine, image: str) -> str:
    """The local image id of ``image``."""
    if engine.name == "buildah":
        proc = engine.run(["inspect", "--type", "image", "--format", "{{.FromImageID}}", image])
    else:
        proc = engine.run(["image", "inspect", "--format", "{{.Id}}", image])
    return proc.stdout.strip()


# --------------------------------------------------------------------------------------------
# Agent base: base image + venv with the agent's runtime dependencies (cached)
# --------------------------------------------------------------------------------------------


def _runtime_requirements(distribution: str) -> list[Requirement]:
    """What ``distribution`` needs at run time here (no extras; markers evaluated for this
    interpreter, which is the base's Python version in every supported build)."""
    out = []
    for text in metadata.requires(distribution) or []:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        out.append(requirement)
    return out


def agent_requirements() -> list[str]:
    """The agent's runtime requirements and everything they pull in, each pinned to what this
    venv runs (tested together; ``make venv`` installs the versions of requirements.lock), so
    the same venv always gives the same agent base."""
    try:
        declared = _runtime_requirements("nodewright-bridge")
    except metadata.PackageNotFoundError as exc:
        raise ImageError("nodewright-bridge is not installed; cannot list agent deps") from exc
    pinned: dict[str, str] = {}
    todo = [r.name for r in declared if canonicalize_name(r.name) not in _NOT_NEEDED_IN_IMAGE]
    while todo:
        name = todo.pop()
        key = canonicalize_name(name)
        if key in pinned:
            continue
        pinned[key] = f"{metadata.metadata(name)['Name']}=={metadata.version(name)}"
        todo += [r.name for r in _runtime_requirements(name)]
    return sorted(pinned.values(), key=str.lower)


def _agent_base_key(base_id: str, requirements: Sequence[str]) -> str:
    digest = hashlib.sha256()
    # The generated files are part of the key: changing how the base is built rebuilds it.
    recipe = agent_base_containerfile(requirements, "") + _AGENT_SCRIPT
    for part in (base_id, *requirements, recipe):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _base_python_version(engine: Engine, base_image: str) -> str:
    if engine.name == "buildah":
        raise ImageError("detecting the base image's Python needs podman or docker")
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    proc = engine.run(
        ["run", "--rm", "--network", "none", "--entrypoint", "python3", base_image, "-c", probe]
    )
    version = proc.stdout.strip()
    if not re.fullmatch(r"3\.\d+", version):
        raise ImageError(f"{base_image}: python3 reports {version!r}; the base needs python3")
    return version


def _download_wheels(requirements: Sequence[str], python_version: str, dest: Path) -> None:
    """Fetch binary wheels for the base's Python into ``dest`` with the host's pip (PyPI or the
    configured index), plus pip itself, which runs from its wheel inside the build."""
    machine = platform.machine()
    platforms = [f"manylinux_2_{minor}_{machine}" for minor in range(17, 37)]
    platforms += [f"manylinux2014_{machine}", f"linux_{machine}"]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    cmd += ["--dest", str(dest), "--only-binary=:all:", "--implementation", "cp"]
    cmd += ["--python-version", python_version]
    for tag in platforms:
        cmd += ["--platform", tag]
    cmd += [*requirements, f"pip=={metadata.version('pip')}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageError("downloading agent wheels failed: " + proc.stderr.strip()[-800:])


_AGENT_SCRIPT = f"""#!{AGENT_PREFIX}/bin/python
# nwb-agent: the in-pod entry point of a NodeWright package image.
import sys

from playbook_adapter.agent.cli import main

sys.exit(main())
"""


def agent_base_containerfile(requirements: Sequence[str], key: str) -> str:
    """Containerfile of the cached agent base (``BASE_IMAGE`` is a build argument)."""
    reqs = " ".join(f"'{r}'" for r in requirements)
    pth = (
        "import sysconfig; "
        "open(sysconfig.get_paths()['purelib'] + '/nwb-agent.pth', 'w')"
        f".write('{AGENT_PREFIX}/agent\\n')"
    )
    return f"""\
ARG BASE_IMAGE={DEFAULT_BASE_IMAGE}
FROM ${{BASE_IMAGE}}
ENV LANG=C.UTF-8 LC_ALL=C.UTF-8
RUN --mount=type=bind,source=wheels,target=/tmp/nwb-wheels \\
    python3 -m venv --without-pip {AGENT_PREFIX} \\
 && pip_wheel="$(ls /tmp/nwb-wheels/pip-*.whl)" \\
 && {AGENT_PREFIX}/bin/python "$pip_wheel/pip" install --quiet --no-index \\
      --no-cache-dir --disable-pip-version-check --find-links /tmp/nwb-wheels {reqs} \\
 && {AGENT_PREFIX}/bin/python -c "{pth}" \\
 && mkdir -p {AGENT_PREFIX}/agent {PACKAGE_ROOT}
COPY nwb-agent {AGENT_PREFIX}/bin/nwb-agent
RUN chmod 0755 {AGENT_PREFIX}/bin/nwb-agent
ENV PATH={AGENT_PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    NW_PACKAGE_DIR={PACKAGE_ROOT} \\
    ANSIBLE_COLLECTIONS_PATH={PACKAGE_ROOT}/collections \\
    ANSIBLE_ROLES_PATH={PACKAGE_ROOT}/roles
ENTRYPOINT ["nwb-agent"]
LABEL "{LABEL_PREFIX}agent-base"="{key}"
"""


@dataclass(frozen=True)
class AgentBase:
    """A cached agent base image and whether this call built it."""

    image: str
    built: bool


def ensure_agent_base(engine: Engine, base_image: str, *, rebuild: bool = False) -> AgentBase:
    """The agent base for ``base_image``, built only when no image with the same key exists."""
    if not engine.image_exists(base_image):
        pull = engine.run(["pull", base_image], check=False)
        if pull.returncode != 0:
            raise ImageError(
                f"base image {base_image} is not available locally and cannot be pulled: "
                + pull.stderr.strip()[-300:]
            )
    requirements = agent_requirements()
    key = _agent_base_key(image_id(engine, base_image), requirements)
    image = f"{AGENT_BASE_REPOSITORY}:{key}"
    if not rebuild and engine.image_exists(image):
        return AgentBase(image=image, built=False)
    python_version = _base_python_version(engine, base_image)
    with tempfile.TemporaryDirectory(prefix="nwb-agent-base-") as tmp:
        context = Path(tmp)
        (context / "wheels").mkdir()
        _download_wheels(requirements, python_version, context / "wheels")
        (context / "nwb-agent").write_text(_AGENT_SCRIPT, encoding="utf-8")
        (context / "Containerfile").write_text(
            agent_base_containerfile(requirements, key), encoding="utf-8"
        )
        _build(engine, context, image, build_args={"BASE_IMAGE": base_image})
    return AgentBase(image=image, built=True)


# --------------------------------------------------------------------------------------------
# Package tree: manifest + role + role deps + collections
# --------------------------------------------------------------------------------------------


def collection_search_paths() -> list[Path]:
    """Where installed collections live, in Ansible's order: the configured/user/system paths,
    then the ``ansible_collections`` trees on ``sys.path`` (the ``ansible`` package's)."""
    paths: list[Path] = []
    configured = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get(
        "ANSIBLE_COLLECTIONS_PATHS"
    )
    if configured:
        paths += [Path(p) / "ansible_collections" for p in configured.split(os.pathsep) if p]
    paths.append(Path.home() / ".ansible" / "collections" / "ansible_collections")
    paths.append(Path("/usr/share/ansible/collections/ansible_collections"))
    paths += [Path(p) / "ansible_collections" for p in sys.path if p]
    return [p for p in paths if p.is_dir()]


def find_collection(name: str, search: Sequence[Path]) -> Path | None:
    """The installed tree of collection ``namespace.name``, or None."""
    namespace, _, collection = name.partition(".")
    for root in search:
        candidate = root / namespace / collection
        if candidate.is_dir():
            return candidate
    return None


def _role_dependencies(role_path: Path) -> list[str]:
    meta = role_path / "meta" / "main.yml"
    if not meta.is_file():
        return []
    data = yaml.safe_load(meta.read_text(encoding="utf-8")) or {}
    names = []
    for dep in data.get("dependencies") or []:
        if isinstance(dep, str):
            names.append(dep)
        elif isinstance(dep, dict) and isinstance(dep.get("role") or dep.get("name"), str):
            names.append(str(dep.get("role") or dep.get("name")))
    return names


def _find_role(name: str, near: Path) -> Path | None:
    search = [near.parent, near / "roles", near.parent.parent / "roles"]
    configured = os.environ.get("ANSIBLE_ROLES_PATH", "")
    search += [Path(p) for p in configured.split(os.pathsep) if p]
    search += [Path.home() / ".ansible" / "roles", Path("/etc/ansible/roles")]
    for root in search:
        if (root / name / "tasks").is_dir() or (root / name / "meta").is_dir():
            return root / name
    return None


@dataclass
class PackageTree:
    """What was assembled under ``package/`` of a build context."""

    path: Path
    roles: list[str] = field(default_factory=list)
    collections: list[str] = field(default_factory=list)


def assemble_package(role_path: Path, manifest: PackageManifest, dest: Path) -> PackageTree:
    """Lay out the package tree (docs/node-pod-contract.md, "Package image") in ``dest`` (created).

    Raises:
        BadInputError: a role dependency or a listed collection is not installed here.
    """
    dest.mkdir(parents=True)
    roles_dir = dest / "roles"
    role_name = role_path.name if manifest.role == "." else Path(manifest.role).name
    tree = PackageTree(path=dest)
    shutil.copytree(role_path, roles_dir / role_name, ignore=_ROLE_IGNORED)
    (roles_dir / role_name / MANIFEST_FILE).unlink(missing_ok=True)
    tree.roles.append(role_name)

    # Role dependencies (meta/main.yml, transitively); FQCN roles travel in their collection.
    wanted_collections = [c.name for c in manifest.collections]
    pending = [*manifest.role_dependencies, *_role_dependencies(role_path)]
    missing: list[str] = []
    while pending:
        dep = pending.pop(0)
        if dep.count(".") >= 2:
            wanted_collections.append(".".join(dep.split(".")[:2]))
            continue
        if dep in tree.roles:
            continue
        found = _find_role(dep, role_path)
        if found is None:
            missing.append(f"role_dependencies: role {dep!r} not found near {role_path}")
            continue
        shutil.copytree(found, roles_dir / dep, ignore=_ROLE_IGNORED)
        tree.roles.append(dep)
        pending += _role_dependencies(found)
    if manifest.role_fqcn:
        wanted_collections.append(".".join(manifest.role_fqcn.split(".")[:2]))
    wanted_collections += AGENT_COLLECTIONS

    search = collection_search_paths()
    collections_root = dest / "collections" / "ansible_collections"
    for name in dict.fromkeys(wanted_collections):
        if name == "ansible.builtin" or name in tree.collections:
            continue
        source = find_collection(name, search)
        if source is None:
            missing.append(f"collections: {name} is not installed (searched {len(search)} paths)")
            continue
        namespace, _, collection = name.partition(".")
        shutil.copytree(source, collections_root / namespace / collection, ignore=_IGNORED)
        tree.collections.append(name)
    if missing:
        raise BadInputError("cannot bundle the package", missing)

    in_image = manifest.model_copy(update={"role": f"roles/{role_name}"})
    (dest / MANIFEST_FILE).write_text(in_image.to_yaml(), encoding="utf-8")
    return tree


# --------------------------------------------------------------------------------------------
# Package image
# --------------------------------------------------------------------------------------------


def _label(key: str, value: str) -> str:
    return f"{json.dumps(key)}={json.dumps(value)}"


def package_labels(manifest: PackageManifest, *, created: datetime, source: str) -> dict[str, str]:
    """Standard OCI labels plus ours (package, version, stages)."""
    labels = {
        "org.opencontainers.image.title": manifest.name,
        "org.opencontainers.image.version": manifest.version,
        "org.opencontainers.image.created": created.astimezone(UTC).isoformat(timespec="seconds"),
        "org.opencontainers.image.description": manifest.description
        or f"NodeWright package {manifest.name}",
        f"{LABEL_PREFIX}package": manifest.name,
        f"{LABEL_PREFIX}version": manifest.version,
        f"{LABEL_PREFIX}stages": ",".join(str(stage) for stage in manifest.stages),
    }
    if source:
        labels["org.opencontainers.image.source"] = source
    return labels


def package_containerfile(labels: dict[str, str]) -> str:
    """Containerfile of a package image; ``AGENT_BASE`` is a build argument."""
    label_lines = " \\\n      ".join(_label(k, v) for k, v in labels.items())
    return f"""\
ARG AGENT_BASE
FROM ${{AGENT_BASE}}
COPY agent/ {AGENT_PREFIX}/agent/
COPY package/ {PACKAGE_ROOT}/
LABEL {label_lines}
"""


def _copy_agent_code(dest: Path) -> None:
    for name in _AGENT_PACKAGES:
        source = Path(importlib.import_module(name).__file__ or "").parent
        shutil.copytree(source, dest / source.name, ignore=_ROLE_IGNORED)


def _git_source(path: Path) -> str:
    proc = subprocess.run(
        ["git", "-C", str(path), "config", "--get", "remote.origin.url"],
        capture_output=True,
        text=True,
        check=False,
    )
    url = proc.stdout.strip()
    # Never leak credentials embedded in a remote URL.
    return re.sub(r"//[^/@]+@", "//", url)


def _build(
    engine: Engine, context: Path, image: str, *, build_args: dict[str, str] | None = None
) -> None:
    args = ["build"] if engine.name != "buildah" else ["build", "--layers"]
    args += ["-f", str(context / "Containerfile"), "-t", image]
    for key, value in (build_args or {}).items():
        args += ["--build-arg", f"{key}={value}"]
    if engine.name == "podman":
        args += ["--network", "none"]
    engine.run([*args, str(context)])


@dataclass(frozen=True)
class BuildResult:
    """What ``build_package`` produced."""

    image: str
    image_id: str
    size_bytes: int
    agent_base: str
    agent_base_built: bool
    labels: dict[str, str]
    roles: tuple[str, ...]
    collections: tuple[str, ...]


def image_size(engine: Engine, image: str) -> int:
    """Size in bytes of ``image`` as the engine reports it (uncompressed, all layers)."""
    if engine.name == "buildah":
        proc = engine.run(["images", "--json", image])
        data = json.loads(proc.stdout or "[]")
        return int(data[0].get("size", 0)) if data else 0
    proc = engine.run(["image", "inspect", "--format", "{{.Size}}", image])
    return int(proc.stdout.strip() or 0)


def load_role_manifest(role_path: Path) -> PackageManifest:
    """The manifest of a role directory (``nwb package init`` writes it)."""
    if not role_path.is_dir():
        raise BadInputError(f"{role_path}: not a directory")
    if not (role_path / MANIFEST_FILE).is_file():
        raise ManifestError(f"{role_path}/{MANIFEST_FILE}: missing; run `nwb package init` first")
    return load_manifest(role_path)


def build_package(
    role_path: Path,
    *,
    engine: Engine,
    tag: str | None = None,
    base_image: str = DEFAULT_BASE_IMAGE,
    now: datetime,
) -> BuildResult:
    """Build the package image of ``role_path`` (which holds ``nodewright-package.yaml``)."""
    role_path = role_path.resolve()
    manifest = load_role_manifest(role_path)
    image = package_reference(manifest, tag)
    agent_base = ensure_agent_base(engine, base_image)
    labels = package_labels(manifest, created=now, source=_git_source(role_path))
    with tempfile.TemporaryDirectory(prefix="nwb-package-") as tmp:
        context = Path(tmp)
        source_role = (role_path / manifest.role).resolve()
        tree = assemble_package(source_role, manifest, context / "package")
        _copy_agent_code(context / "agent")
        (context / "Containerfile").write_text(package_containerfile(labels), encoding="utf-8")
        _build(engine, context, image, build_args={"AGENT_BASE": agent_base.image})
    return BuildResult(
        image=image,
        image_id=image_id(engine, image),
        size_bytes=image_size(engine, image),
        agent_base=agent_base.image,
        agent_base_built=agent_base.built,
        labels=labels,
        roles=tuple(tree.roles),
        collections=tuple(tree.collections),
    )


# --------------------------------------------------------------------------------------------
# Push, archive, inspect
# --------------------------------------------------------------------------------------------


def push_image(engine: Engine, image: str, *, tls_verify: bool = True) -> str:
    """Push ``image`` to its registry; return the pushed manifest digest ('' if unknown)."""
    with tempfile.TemporaryDirectory(prefix="nwb-push-") as tmp:
        digest_file = Path(tmp) / "digest"
        args = ["push"]
        if engine.name in ("podman", "buildah"):
            args += [f"--tls-verify={'true' if tls_verify else 'false'}"]
            args += ["--digestfile", str(digest_file)]
        proc = engine.run([*args, image])
        if digest_file.is_file():
            return digest_file.read_text(encoding="utf-8").strip()
        match = re.search(r"digest: (sha256:[0-9a-f]{64})", proc.stdout)
        return match.group(1) if match else ""


def pull_image(engine: Engine, image: str, *, tls_verify: bool = True) -> None:
    """Pull ``image`` (used by tests and ``inspect`` of remote images)."""
    args = ["pull"]
    if engine.name in ("podman", "buildah"):
        args.append(f"--tls-verify={'true' if tls_verify else 'false'}")
    engine.run([*args, image])


def save_oci_archive(engine: Engine, image: str, path: Path) -> None:
    """Write ``image`` as an OCI archive (a tarball any OCI tool can load)."""
    if engine.name == "podman":
        engine.run(["save", "--format", "oci-archive", "-o", str(path), image])
    elif engine.name == "buildah":
        engine.run(["push", image, f"oci-archive:{path}"])
    else:
        engine.run(["save", "-o", str(path), image])


@dataclass(frozen=True)
class ImageInfo:
    """Labels and the package manifest read from an image."""

    image: str
    image_id: str
    size_bytes: int
    labels: dict[str, str]
    manifest: PackageManifest | None
    manifest_text: str


def _read_file_from_image(engine: Engine, image: str, path: str) -> str:
    if engine.name == "podman":
        mount = engine.run(["image", "mount", image], check=False)
        if mount.returncode == 0 and mount.stdout.strip():
            try:
                file = Path(mount.stdout.strip()) / path.lstrip("/")
                return file.read_text(encoding="utf-8") if file.is_file() else ""
            finally:
                engine.run(["image", "unmount", image], check=False)
    proc = engine.run(
        ["run", "--rm", "--network", "none", "--entrypoint", "cat", image, path], check=False
    )
    return proc.stdout if proc.returncode == 0 else ""


def inspect_image(engine: Engine, image: str) -> ImageInfo:
    """Labels, size and the manifest (``/nodewright/package/nodewright-package.yaml``) of a local
    image. Raises ImageError when the image is not present locally."""
    if not engine.image_exists(image):
        raise ImageError(f"{image}: no such image in local storage (pull it first)")
    if engine.name == "buildah":
        raw = json.loads(engine.run(["inspect", "--type", "image", image]).stdout)
        labels = raw.get("OCIv1", {}).get("config", {}).get("Labels") or {}
    else:
        raw_list = json.loads(engine.run(["image", "inspect", image]).stdout)
        raw = raw_list[0] if raw_list else {}
        labels = raw.get("Labels") or (raw.get("Config") or {}).get("Labels") or {}
    text = _read_file_from_image(engine, image, f"{PACKAGE_ROOT}/{MANIFEST_FILE}")
    manifest = (
        parse_manifest(text, source=f"{image}:{PACKAGE_ROOT}/{MANIFEST_FILE}") if text else None
    )
    return ImageInfo(
        image=image,
        image_id=image_id(engine, image),
        size_bytes=image_size(engine, image),
        labels={str(k): str(v) for k, v in labels.items()},
        manifest=manifest,
        manifest_text=text,
    )


def looks_like_image(reference: str) -> bool:
    """Whether ``reference`` names an image rather than a local directory (for ``inspect``)."""
    if Path(reference).exists():
        return False
    return bool(re.fullmatch(r"[\w.\-/:@]+", reference))
