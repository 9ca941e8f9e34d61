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

Under pytest-xdist (``pytest -n 2``) the workers collect and the controller only
sees reports: the allowance or its refusal, judged where the item is collected, rides on each
test report's ``user_properties``, so the summary and the exit status are the same either way.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Mapping
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


# The allowance (or why it is refused) as it rides on a test report's ``user_properties``.
ALLOWED_PROPERTY = "nwb_skip_allowed"
REFUSED_PROPERTY = "nwb_skip_refused"
ALLOWANCE = pytest.StashKey[tuple[str, str]]()


def allowance(item: pytest.Item, rootpath: Path) -> tuple[str, str] | None:
    """``(ALLOWED_PROPERTY, why)`` or ``(REFUSED_PROPERTY, what is wrong)`` for an item carrying
    the allowance mark, else None."""
    mark = item.get_closest_marker(ALLOW_MARK)
    if mark is None:
        return None
    why = str(mark.kwargs.get("reason") or (mark.args[0] if mark.args else "")).strip()
    tier = machine_tier(item, rootpath)
    if tier is not None:
        return REFUSED_PROPERTY, f"{ALLOW_MARK} on a test of {tier}: these must run"
    if not why:
        return REFUSED_PROPERTY, f'{ALLOW_MARK} without a reason: {ALLOW_MARK}("why")'
    return ALLOWED_PROPERTY, why


@dataclass(eq=False)  # a plugin: pluggy keeps it in sets, so hashed by identity
class TierGuard:
    rootpath: Path
    refused: dict[str, str] = field(default_factory=dict)  # nodeid -> what is wrong with it
    skipped: dict[str, str] = field(default_factory=dict)  # nodeid -> skip reason

    @pytest.hookimpl
    def pytest_itemcollected(self, item: pytest.Item) -> None:
        judged = allowance(item, self.rootpath)
        if judged is not None:
            item.stash[ALLOWANCE] = judged

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        judged = item.stash.get(ALLOWANCE, None)
        if judged is not None:
            report.user_properties.append(judged)
        return report

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:
            self.skipped.setdefault(report.nodeid, skip_reason(report))

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        judged = dict(report.user_properties)
        if REFUSED_PROPERTY in judged:
            self.refused.setdefault(report.nodeid, str(judged[REFUSED_PROPERTY]))
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        if ALLOWED_PROPERTY in judged:
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
