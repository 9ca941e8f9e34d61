"""Build the controller image from a checkout: ``nwb image build controller`` / ``make images``.

Why this shape: the image must hold exactly the locked dependency set and name the commit it was
built from, and a rebuild of an unchanged tree must cost nothing (CI builds it in every run).
So the build context is assembled here: the lock's wheels (``lockfile.wheelhouse``, cached), the
project's wheel built from the checkout with a ``REVISION`` file inside, the Containerfile and its
install script (both in this package). The image is tagged ``<repository>:build-<key>`` first,
where the key hashes everything that goes in (base image id, lock, sources, recipe, version,
revision): an existing key is re-used without building, then tagged with the requested tag.

The default reference is ``localhost/nodewright-bridge:<version>``, which is also the chart's
default image; push it to your registry with ``--tag <registry>/<path>:<version> --push``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nodewright_bridge import __version__
from nodewright_bridge.buildinfo import git_revision
from nodewright_bridge.images.lockfile import LOCK_NAME, load_lock, wheelhouse
from nodewright_bridge.images.python_base import NONROOT_UID, ensure_python_base
from playbook_adapter.imaging import (
    Engine,
    ImageError,
    image_id,
    image_size,
    push_image,
    split_reference,
)

CONTROLLER_REPOSITORY = "localhost/nodewright-bridge"
SOURCE_URL = "https://github.com/nodewright/nodewright-bridge"
HERE = Path(__file__).parent
CONTAINERFILE = HERE / "controller.Containerfile"
INSTALL_SCRIPT = HERE / "install_controller.py"
# What of a checkout goes into the project's wheel (and so into the key).
_SOURCES = ("lifecycle", "playbook_adapter", "nodewright_bridge")
_SOURCE_FILES = ("pyproject.toml", "README.md")


def default_reference() -> str:
    return f"{CONTROLLER_REPOSITORY}:{__version__}"


def checkout_root() -> Path:
    """The repository this package runs from (a build needs its sources and lock file)."""
    root = HERE.parents[1]
    if not (root / "pyproject.toml").is_file() or not (root / LOCK_NAME).is_file():
        raise ImageError(
            f"{root}: not a nodewright-bridge checkout (no pyproject.toml and {LOCK_NAME}); "
            "build the controller image from a clone of the repository"
        )
    return root


def _source_files(root: Path) -> Iterator[Path]:
    for name in _SOURCE_FILES:
        yield root / name
    for package in _SOURCES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.name != "REVISION":
                yield path


def build_key(root: Path, *, base_id: str, lock_digest: str, revision: str) -> str:
    digest = hashlib.sha256()
    for part in (base_id, lock_digest, revision, __version__):
        digest.update(part.encode() + b"\0")
    for recipe in (CONTAINERFILE, INSTALL_SCRIPT):
        digest.update(recipe.read_bytes() + b"\0")
    for path in _source_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _build_wheel(root: Path, revision: str, dest: Path) -> None:
    """The project's wheel, built from a copy of the sources with ``REVISION`` written in."""
    with tempfile.TemporaryDirectory(prefix="nwb-src-") as tmp:
        src = Path(tmp)
        for name in _SOURCE_FILES:
            shutil.copy2(root / name, src / name)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "REVISION")
        for package in _SOURCES:
            shutil.copytree(root / package, src / package, ignore=ignore)
        (src / "nodewright_bridge" / "REVISION").write_text(revision + "\n", encoding="utf-8")
        cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check"]
        cmd += ["--no-deps", "--wheel-dir", str(dest), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ImageError("building the project's wheel failed: " + proc.stderr[-800:])


def _forget_older_builds(engine: Engine, *, keep: str) -> None:
    """Untag earlier ``build-<key>`` images, so rebuilds after every change do not pile up
    (an image that still has another tag stays)."""
    listed = engine.run(
        ["images", "--format", "{{.Repository}}:{{.Tag}}", CONTROLLER_REPOSITORY], check=False
    )
    for reference in listed.stdout.split():
        if reference.startswith(f"{CONTROLLER_REPOSITORY}:build-") and reference != keep:
            engine.run(["rmi", reference], check=False)


def labels(revision: str) -> dict[str, str]:
    """The OCI labels the image carries (the Containerfile sets them from these build args)."""
    return {
        "org.opencontainers.image.source": SOURCE_URL,
        "org.opencontainers.image.version": __version__,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.licenses": "Apache-2.0",
    }


@dataclass(frozen=True)
class ControllerImage:
    image: str
    image_id: str
    size_bytes: int
    built: bool  # False: an image with the same key existed
    base_image: str
    revision: str
    version: str


def build_controller_image(
    engine: Engine,
    rootfs: Path,
    *,
    tag: str | None = None,
    push: bool = False,
    tls_verify: bool = True,
    rebuild: bool = False,
    base_image: str | None = None,
) -> ControllerImage:
    """Build (or re-use) the controller image and tag it ``tag`` (default
    ``localhost/nodewright-bridge:<version>``); ``push`` sends it to the tag's registry.

    ``base_image`` replaces the slim Python base: any local image with ``/usr/bin/python3`` of
    the lock's Python version (``# python:`` in requirements.lock) and the ``venv`` module.
    """
    root = checkout_root()
    reference = tag or default_reference()
    repository, image_tag = split_reference(reference)
    reference = f"{repository}:{image_tag or __version__}"
    revision = git_revision(root)
    base = base_image or ensure_python_base(engine, rootfs).image
    lock_path = root / LOCK_NAME
    lock = load_lock(lock_path)
    key = build_key(
        root, base_id=image_id(engine, base), lock_digest=lock.digest, revision=revision
    )
    keyed = f"{CONTROLLER_REPOSITORY}:build-{key}"
    built = False
    if rebuild or not engine.image_exists(keyed):
        wheels = wheelhouse(lock_path)
        with tempfile.TemporaryDirectory(prefix="nwb-controller-image-") as tmp:
            context = Path(tmp)
            shutil.copytree(wheels, context / "wheels")
            shutil.copy2(lock_path, context / LOCK_NAME)
            shutil.copy2(INSTALL_SCRIPT, context / INSTALL_SCRIPT.name)
            _build_wheel(root, revision, context / "dist")
            args = ["build", "-f", str(CONTAINERFILE), "-t", keyed]
            build_args = {
                "BASE_IMAGE": base,
                "VERSION": __version__,
                "REVISION": revision,
                "SOURCE": SOURCE_URL,
            }
            for name, value in build_args.items():
                args += ["--build-arg", f"{name}={value}"]
            if engine.name == "podman":
                # No network; no cached intermediate images (the key above is the cache).
                args += ["--network", "none", "--layers=false"]
            engine.run([*args, str(context)])
        built = True
        _forget_older_builds(engine, keep=keyed)
    if reference != keyed:
        previous = image_id(engine, reference) if engine.image_exists(reference) else ""
        engine.run(["tag", keyed, reference])
        if previous and previous != image_id(engine, reference):
            engine.run(["rmi", previous], check=False)  # only if nothing else still uses it
    if push:
        push_image(engine, reference, tls_verify=tls_verify)
    return ControllerImage(
        image=reference,
        image_id=image_id(engine, reference),
        size_bytes=image_size(engine, reference),
        built=built,
        base_image=base,
        revision=revision,
        version=__version__,
    )


def image_user(engine: Engine, image: str) -> str:
    """The image's configured user (``65532:65532`` for the controller image)."""
    return engine.run(["image", "inspect", "--format", "{{.Config.User}}", image]).stdout.strip()


__all__ = ["NONROOT_UID", "ControllerImage", "build_controller_image", "default_reference"]
