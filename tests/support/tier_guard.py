"""Skips fail the run under CI: a tier that silently does not run must not look green.

Loaded by ``tests/conftest.py``. On when ``NWB_REQUIRE_ALL_TIERS`` is ``1`` (``make test`` sets
it), or, when that variable is unset or empty, when ``CI`` is set to anything but ``0`` /
``false`` / ``no`` / ``off`` (our CI runs ``CI=true bash .ci/run``); ``NWB_REQUIRE_ALL_TIERS=0``
turns it off even under CI.

When on, every skipped test, and every module skipped at collection, turns a passing session
into a failure (exit status 1) and the summary names each one with its reason: a missing binary
or a run without root skips whole tiers (``tests/integration``, ``tests/e2e``, the tests marked
``podman`` or ``rootfs``), and that must show. A pure test skipped on purpose says so with the
named allowance ``@pytest.mark.skip_allowed("why")``; the allowance is refused (itself a
failure) on a test of those tiers. Expected failures (``xfail``) are not skips.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ENV = "NWB_REQUIRE_ALL_TIERS"
ALLOW_MARK = "skip_allowed"
# Relative to the rootdir; and the marks of tests that need this machine's podman or rootfs.
MACHINE_TIERS = ("tests/integration", "tests/e2e")
MACHINE_MARKS = ("podman", "rootfs")
_OFF = ("", "0", "false", "no", "off")


def required(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether skips fail the run (see the module docstring)."""
    explicit = environ.get(ENV, "").strip().lower()
    if explicit:
        return explicit not in _OFF
    return environ.get("CI", "").strip().lower() not in _OFF


def machine_tier(item: pytest.Item, rootpath: Path) -> str | None:
    """The tier that makes ``item`` need this machine (a folder or a mark), else None."""
    try:
        where = item.path.relative_to(rootpath).as_posix()
    except ValueError:
        where = item.path.as_posix()
    for tier in MACHINE_TIERS:
        if where == tier or where.startswith(tier + "/"):
            return tier
    for mark in MACHINE_MARKS:
        if item.get_closest_marker(mark) is not None:
            return f"@pytest.mark.{mark}"
    return None


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        return reason.removeprefix("Skipped: ") or "(no reason given)"
    return str(longrepr) or "(no reason given)"


@dataclass(eq=False)  # a plugin: pluggy keeps it in sets, so hashed by identity
class TierGuard:
    rootpath: Path
    allowed: dict[str, str] = field(default_factory=dict)  # nodeid -> why it may skip
    refused: dict[str, str] = field(default_factory=dict)  # nodeid -> what is wrong with it
    skipped: dict[str, str] = field(default_factory=dict)  # nodeid -> skip reason

    @pytest.hookimpl
    def pytest_itemcollected(self, item: pytest.Item) -> None:
        mark = item.get_closest_marker(ALLOW_MARK)
        if mark is None:
            return
        why = str(mark.kwargs.get("reason") or (mark.args[0] if mark.args else "")).strip()
        tier = machine_tier(item, self.rootpath)
        if tier is not None:
            self.refused[item.nodeid] = f"{ALLOW_MARK} on a test of {tier}: these must run"
        elif not why:
            self.refused[item.nodeid] = f'{ALLOW_MARK} without a reason: {ALLOW_MARK}("why")'
        else:
            self.allowed[item.nodeid] = why

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:
            self.skipped.setdefault(report.nodeid, skip_reason(report))

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        if report.nodeid in self.allowed and report.nodeid not in self.refused:
            return
        self.skipped.setdefault(report.nodeid, skip_reason(report))

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not (self.skipped or self.refused):
            return
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        lines = self.report_lines()
        if lines:
            terminalreporter.section("skipped tests fail this run", sep="=", red=True, bold=True)
        for line in lines:
            terminalreporter.write_line(line, red=True)

    def report_lines(self) -> list[str]:
        if not (self.skipped or self.refused):
            return []
        lines = [
            f"under CI or {ENV}=1 every test must run ({ENV}=0 allows skips): "
            f"{len(self.skipped)} skipped, {len(self.refused)} refused {ALLOW_MARK}"
        ]
        by_reason: dict[str, list[str]] = {}
        for nodeid, reason in self.skipped.items():
            by_reason.setdefault(reason, []).append(nodeid)
        for reason, nodeids in by_reason.items():
            lines.append(f"  skipped ({len(nodeids)}): {reason}")
            lines += [f"    {nodeid}" for nodeid in nodeids]
        for nodeid, problem in self.refused.items():
            lines.append(f"  refused: {nodeid}: {problem}")
        return lines


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{ALLOW_MARK}(reason): a pure test may skip under CI or {ENV}=1, for this reason (never "
        f"a test of {', '.join(MACHINE_TIERS)} or marked {' / '.join(MACHINE_MARKS)})",
    )
    if required():
        config.pluginmanager.register(TierGuard(config.rootpath), "nwb-tier-guard")
