"""A slim Python base image cut out of the cached debootstrap root filesystem.

Why: no public registry is reachable from where this project is built and tested, and the full
debootstrap tree (apt, dpkg, perl, systemd, ~150 MB as an image) is far more than a controller
needs. The sandbox already caches a Debian tree with ``python3``; this module copies only the
files of the Debian packages Python needs (``python3.11-minimal``, ``libpython3.11-stdlib``,
``python3-minimal`` and their dependency closure, read from the tree's own dpkg database) into a
new tree, adds a ``nonroot`` user (uid/gid 65532), and imports it as
``localhost/nwb-python-base:<key>``: a distroless-style image of ~45 MB with no shell, no package
manager and nothing to configure at run time.

Guarantees: the key hashes the source tree's cache key, the chosen packages with their versions
and this recipe, so the same tree always gives the same tag (and the image is built once).
Caveats: the packages that only configure a system (debconf, dpkg, perl-base, tzdata,
install-info) are left out on purpose; Python's ``zoneinfo`` then uses the ``tzdata`` wheel of the
lock file.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from playbook_adapter.imaging import Engine, ImageError, image_id

PYTHON_BASE_REPOSITORY = "localhost/nwb-python-base"
# Bump when what goes into the tree changes (part of the cache key).
RECIPE_VERSION = 1
ROOT_PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib", "python3-minimal")
# Packages that configure a Debian system; a container image needs none of them.
LEFT_OUT = frozenset({"debconf", "dpkg", "perl-base", "tzdata", "install-info"})
# Never copied even when a package lists them: documentation and translations.
_SKIPPED_PREFIXES = (
    "/usr/share/doc",
    "/usr/share/man",
    "/usr/share/info",
    "/usr/share/locale",
    "/usr/share/lintian",
)
NONROOT_UID = 65532
_PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"nonroot:x:{NONROOT_UID}:{NONROOT_UID}:nonroot:/home/nonroot:/usr/sbin/nologin\n"
)
_GROUP = f"root:x:0:\nnonroot:x:{NONROOT_UID}:\n"
_NSSWITCH = "passwd: files\ngroup: files\nhosts: files dns\n"


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    depends: tuple[tuple[str, ...], ...]  # alternatives per dependency
    provides: tuple[str, ...]


def _names(field: str) -> list[tuple[str, ...]]:
    """``a (>= 1) | b, c:any`` -> [(a, b), (c,)]."""
    out = []
    for group in field.split(","):
        alternatives = tuple(
            alt.strip().split(" ")[0].split(":")[0] for alt in group.split("|") if alt.strip()
        )
        if alternatives:
            out.append(alternatives)
    return out


def installed_packages(status_text: str) -> dict[str, DebPackage]:
    """The installed packages of a dpkg ``status`` file, by name."""
    found: dict[str, DebPackage] = {}
    for stanza in status_text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" not in fields or not fields.get("Status", "").endswith(" installed"):
            continue
        depends = _names(fields.get("Pre-Depends", "")) + _names(fields.get("Depends", ""))
        provides = tuple(alts[0] for alts in _names(fields.get("Provides", "")))
        found[fields["Package"]] = DebPackage(
            fields["Package"], fields.get("Version", ""), tuple(depends), provides
        )
    return found


def dependency_closure(
    packages: dict[str, DebPackage], roots: Iterable[str], left_out: frozenset[str] = LEFT_OUT
) -> list[DebPackage]:
    """``roots`` and everything they depend on (first installed alternative), minus ``left_out``."""
    providers: dict[str, str] = {}
    for package in packages.values():
        for virtual in package.provides:
            providers.setdefault(virtual, package.name)
    chosen: dict[str, DebPackage] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in chosen or name in left_out:
            continue
        if name not in packages:
            raise ImageError(f"package {name} is not installed in the source root filesystem")
        package = packages[name]
        chosen[name] = package
        for alternatives in package.depends:
            for alt in alternatives:
                real = alt if alt in packages else providers.get(alt)
                if real is not None:
                    todo.append(real)
                    break
    return sorted(chosen.values(), key=lambda p: p.name)


def package_files(rootfs: Path, package: str) -> list[str]:
    """Paths (absolute inside the tree) dpkg recorded for ``package``."""
    info = rootfs / "var/lib/dpkg/info"
    lists = [info / f"{package}.list", *info.glob(f"{package}:*.list")]
    paths: list[str] = []
    for listing in lists:
        if listing.is_file():
            paths += [line for line in listing.read_text().splitlines() if line.strip()]
    return paths


def python_base_key(source_key: str, packages: Iterable[DebPackage]) -> str:
    recipe = json.dumps(
        {
            "recipe": RECIPE_VERSION,
            "source": source_key,
            "packages": [f"{p.name}={p.version}" for p in packages],
            "passwd": _PASSWD,
        }
    )
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def _selected_paths(rootfs: Path, packages: Iterable[DebPackage]) -> list[str]:
    # Merged /usr: dpkg lists /lib/x/y while /lib is a link to usr/lib; copy the real path.
    links = {
        top: str((rootfs / top).readlink())
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
        if (rootfs / top).is_symlink()
    }
    wanted: set[str] = set()
    for package in packages:
        for listed in package_files(rootfs, package.name):
            if listed in ("/.", "/") or listed.startswith(_SKIPPED_PREFIXES):
                continue
            top, _, rest = listed.lstrip("/").partition("/")
            if top in links:
                listed = "/" + links[top].strip("/") + (f"/{rest}" if rest else "")  # noqa: PLW2901
            wanted.add(listed)
    # Byte code Debian compiles after installing (not in any file list): without it a read-only
    # root would recompile the standard library on every start.
    for path in list(wanted):
        cache = rootfs / path.lstrip("/") / "__pycache__"
        if path.startswith("/usr/lib/python3") and cache.is_dir() and not cache.is_symlink():
            wanted.add(f"{path}/__pycache__")
            wanted.update(f"{path}/__pycache__/{f.name}" for f in cache.iterdir())
    existing = [p for p in wanted if (rootfs / p.lstrip("/")).exists() or _is_link(rootfs, p)]
    # The merged-/usr links themselves belong to no package; they go last (their targets first).
    return sorted("." + p for p in existing) + [f"./{top}" for top in sorted(links)]


def _is_link(rootfs: Path, path: str) -> bool:
    return (rootfs / path.lstrip("/")).is_symlink()


def build_tree(rootfs: Path, packages: list[DebPackage], dest: Path) -> None:
    """Copy the packages' files from ``rootfs`` into ``dest`` and add the image's own files."""
    listing = dest.parent / "files.txt"
    listing.write_text("\n".join(_selected_paths(rootfs, packages)) + "\n")
    dest.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(
        ["tar", "-C", str(rootfs), "--no-recursion", "-T", str(listing), "-cf", "-"],
        stdout=subprocess.PIPE,
    ) as source:
        unpacked = subprocess.run(
            ["tar", "-C", str(dest), "-xf", "-"],
            stdin=source.stdout,
            capture_output=True,
            text=True,
            check=False,
        )
        if source.stdout is not None:
            source.stdout.close()
        copied = source.wait()
    if copied != 0 or unpacked.returncode != 0:
        raise ImageError(f"copying Python out of {rootfs} failed: {unpacked.stderr.strip()}")
    etc = dest / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(_PASSWD)
    (etc / "group").write_text(_GROUP)
    (etc / "nsswitch.conf").write_text(_NSSWITCH)
    for directory, mode in (("tmp", 0o1777), ("root", 0o700), ("home/nonroot", 0o755)):
        (dest / directory).mkdir(parents=True, exist_ok=True)
        (dest / directory).chmod(mode)
    if not (dest / "usr/bin/python3").exists():
        raise ImageError(f"{rootfs}: no usr/bin/python3 after copying {ROOT_PACKAGES}")


@dataclass(frozen=True)
class PythonBase:
    image: str
    built: bool
    packages: tuple[str, ...]


def ensure_python_base(engine: Engine, rootfs: Path, *, rebuild: bool = False) -> PythonBase:
    """``localhost/nwb-python-base:<key>`` from ``rootfs`` (the sandbox's cached tree)."""
    status = (rootfs / "var/lib/dpkg/status").read_text()
    packages = dependency_closure(installed_packages(status), ROOT_PACKAGES)
    names = tuple(f"{p.name}={p.version}" for p in packages)
    image = f"{PYTHON_BASE_REPOSITORY}:{python_base_key(rootfs.name, packages)}"
    if not rebuild and engine.image_exists(image):
        return PythonBase(image, False, names)
    if engine.name == "buildah":
        raise ImageError("importing the Python base needs podman or docker (buildah has no import)")
    with tempfile.TemporaryDirectory(prefix="nwb-python-base-") as tmp:
        tree = Path(tmp) / "tree"
        build_tree(rootfs, packages, tree)
        changes = ["--change", "ENV LANG=C.UTF-8", "--change", f"USER {NONROOT_UID}"]
        tar_cmd = ["tar", "-C", str(tree), "--numeric-owner", "--owner=0", "--group=0"]
        with subprocess.Popen([*tar_cmd, "-cf", "-", "."], stdout=subprocess.PIPE) as tar:
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
        shutil.rmtree(tree, ignore_errors=True)
    if tar_rc != 0 or proc.returncode != 0:
        raise ImageError(f"importing the Python base failed: {proc.stderr.strip()[-400:]}")
    image_id(engine, image)
    return PythonBase(image, True, names)
