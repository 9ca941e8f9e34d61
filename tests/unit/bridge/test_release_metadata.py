"""Release hygiene: one version everywhere, a revision next to it, a Keep a Changelog file, and a
lock file that pins every runtime dependency at the versions this venv runs."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import semver
import yaml
from click.testing import CliRunner
from packaging.requirements import Requirement

from nodewright_bridge import __version__
from nodewright_bridge.buildinfo import revision
from nodewright_bridge.cli import main
from nodewright_bridge.images.controller import default_reference
from nodewright_bridge.images.lockfile import load_lock, normalize

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "nodewright-bridge"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCK = load_lock(ROOT / "requirements.lock")


def test_the_package_version_is_read_from_one_place_and_the_chart_app_version_matches_it() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    source = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert source == "nodewright_bridge.__version__"
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__, (
        "Chart.yaml appVersion must equal nodewright_bridge.__version__ (bump both together)"
    )


def test_the_chart_default_image_is_the_one_make_images_builds() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    repository = values["image"]["repository"]
    tag = values["image"]["tag"] or yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert f"{repository}:{tag}" == default_reference()


def test_nwb_version_prints_the_version_and_the_revision() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"nwb {__version__} (revision {revision()})"
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", revision())


def test_the_changelog_follows_keep_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "keepachangelog.com" in text and "semver.org" in text
    releases = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert releases and releases[0] == "[Unreleased]"
    for heading in releases[1:]:
        assert re.fullmatch(r"\[\d+\.\d+\.\d+[^\]]*\] - \d{4}-\d{2}-\d{2}", heading), heading
    kinds = set(re.findall(r"^### (.+)$", text, flags=re.MULTILINE))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds
    versions = [semver.Version.parse(h[1:].split("]")[0]) for h in releases[1:]]
    assert versions == sorted(versions, reverse=True), "newest release first"
    assert all(v <= semver.Version.parse(__version__) for v in versions), (
        f"CHANGELOG.md has a release newer than the package version {__version__}"
    )


def test_the_lock_pins_every_runtime_dependency_within_its_declared_range() -> None:
    pinned = {normalize(p.name): p.version for p in LOCK.pins}
    for declared in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(declared)
        name = normalize(requirement.name)
        assert name in pinned, f"{requirement.name} is not in requirements.lock: run `make lock`"
        assert requirement.specifier.contains(pinned[name]), (
            f"requirements.lock pins {name}=={pinned[name]}, outside {requirement.specifier}: "
            "run `make lock`"
        )


def test_this_venv_runs_the_locked_versions() -> None:
    """The tests exercise what the image ships (``make venv`` installs with the lock's
    versions as constraints)."""
    stale = {
        p.name: (metadata.version(p.name), p.version)
        for p in LOCK.pins
        if metadata.version(p.name) != p.version
    }
    assert stale == {}, f"installed vs locked: {stale}; run `make venv`"
