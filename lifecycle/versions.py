"""Strict semantic versions and the install / upgrade / downgrade decision.

Why strict: the version is also the image tag and the key of per-node state, so ``1.2`` and
``1.2.0`` must not silently mean the same thing (NodeWright accepts both through Go's lenient
parser). All comparisons go through the ``semver`` library so pre-release ordering follows the
SemVer 2.0.0 spec (``1.0.0-rc.1 < 1.0.0``, ``alpha.9 < alpha.10``).

Caveats: build metadata (``+build``) does not take part in precedence, so two versions that differ
only in build metadata compare ``SAME``.
"""

from __future__ import annotations

from enum import StrEnum

import semver

from lifecycle.errors import InvalidVersionError


class VersionChange(StrEnum):
    """What moving a node from the installed version to the wanted one means."""

    INSTALL = "install"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    SAME = "same"


def parse(version: str) -> semver.Version:
    """Parse a strict semver string (``MAJOR.MINOR.PATCH[-pre][+build]``, no ``v`` prefix).

    Raises:
        InvalidVersionError: the string is not strict semver.
    """
    try:
        return semver.Version.parse(version)
    except (ValueError, TypeError) as exc:
        raise InvalidVersionError(str(version)) from exc


def is_strict_semver(version: str) -> bool:
    """True when ``version`` parses as strict semver."""
    try:
        parse(version)
    except InvalidVersionError:
        return False
    return True


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` has lower, equal or higher precedence than ``b``."""
    return parse(a).compare(parse(b))


def direction(installed: str | None, wanted: str) -> VersionChange:
    """Classify the change from ``installed`` (``None`` = not installed) to ``wanted``.

    Raises:
        InvalidVersionError: either version is not strict semver.
    """
    target = parse(wanted)
    if installed is None:
        return VersionChange.INSTALL
    order = parse(installed).compare(target)
    if order < 0:
        return VersionChange.UPGRADE
    if order > 0:
        return VersionChange.DOWNGRADE
    return VersionChange.SAME
