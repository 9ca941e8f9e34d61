"""The tier guard (tests/support/tier_guard.py) on a small suite of its own, run by a real pytest in
a subprocess with this repository's tests/conftest.py: a skip fails the run under CI or
NWB_REQUIRE_ALL_TIERS=1 and is named with its reason; without them a skip stays a skip. On two
pytest-xdist workers the verdict and the summary are the same."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tier_guard

ROOT = Path(__file__).resolve().parents[2]

# A pure test skipped on purpose, with the named allowance.
ALLOWED_SKIP = """
import pytest

def test_runs(): pass

@pytest.mark.skip_allowed("only meaningful on big-endian machines")
@pytest.mark.skipif(True, reason="little-endian")
def test_skipped_on_purpose(): pass
"""

SUITE = {
    "pytest.ini": "[pytest]\nmarkers =\n    podman: needs podman\n    rootfs: needs a rootfs\n",
    "tests/integration/test_needs_box.py": """
import pytest

@pytest.fixture(scope="session")
def box():
    pytest.skip("control-plane binaries missing")

def test_uses_the_box(box): pass
def test_uses_it_too(box): pass
def test_runs(): pass
""",
    "tests/e2e/test_as_root.py": """
import pytest

pytest.skip("exec-mode nodes need root", allow_module_level=True)

def test_never_collected(): pass
""",
    "tests/unit/test_pure.py": ALLOWED_SKIP
    + """
@pytest.mark.podman
@pytest.mark.skipif(True, reason="podman missing")
def test_needs_podman(): pass
""",
}

SKIPS = [
    "tests/integration/test_needs_box.py::test_uses_the_box",
    "tests/integration/test_needs_box.py::test_uses_it_too",
    "control-plane binaries missing",
    "tests/e2e/test_as_root.py",
    "exec-mode nodes need root",
    "tests/unit/test_pure.py::test_needs_podman",
    "podman missing",
]


def write(where: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    shutil.copy(ROOT / "tests" / "conftest.py", where / "tests" / "conftest.py")
    return where


def run(
    where: Path, *args: str, timeout: float = 25, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CI", tier_guard.ENV, "PYTEST_ADDOPTS", "PYTEST_PLUGINS")
    }
    environ["PYTHONPATH"] = str(ROOT / "tests" / "support")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(where)],
        cwd=where,
        env=environ | env,
        capture_output=True,
        text=True,
        timeout=timeout,  # within the test's own limit
        check=False,
    )


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("suite"), SUITE)


def test_without_ci_a_skip_stays_a_skip(suite: Path) -> None:
    done = run(suite)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped tests fail this run" not in done.stdout


@pytest.mark.parametrize(
    "env",
    [{tier_guard.ENV: "1"}, {"CI": "true"}],
    ids=[f"{tier_guard.ENV}=1", "CI=true"],
)
def test_under_ci_every_skip_fails_the_run_and_is_named_with_its_reason(
    suite: Path, env: dict[str, str]
) -> None:
    done = run(suite, **env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "skipped tests fail this run" in done.stdout
    report = done.stdout.split("skipped tests fail this run", 1)[1]
    for text in SKIPS:
        assert text in report, done.stdout
    assert "4 skipped, 0 refused" in report
    assert "test_skipped_on_purpose" not in report  # carries the named allowance


def test_the_explicit_switch_turns_the_guard_off_under_ci(suite: Path) -> None:
    done = run(suite, CI="true", **{tier_guard.ENV: "0"})
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_suite_whose_only_skip_is_allowed_passes(tmp_path: Path) -> None:
    files = {"pytest.ini": SUITE["pytest.ini"], "tests/unit/test_pure.py": ALLOWED_SKIP}
    done = run(write(tmp_path, files), **{tier_guard.ENV: "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 1 skipped" in done.stdout


# Allowances the guard refuses (and one it grants, which must not count).
REFUSED = {
    "pytest.ini": SUITE["pytest.ini"],
    "tests/integration/test_box.py": (
        "import pytest\n\n"
        '@pytest.mark.skip_allowed("flaky box")\n'
        '@pytest.mark.skip(reason="no box")\n'
        "def test_box(): pass\n"
    ),
    "tests/unit/test_pure.py": ALLOWED_SKIP
    + (
        "\n@pytest.mark.skip_allowed\n"
        "def test_no_reason(): pass\n\n"
        "@pytest.mark.rootfs\n"
        '@pytest.mark.skip_allowed("no debootstrap")\n'
        "def test_rootfs(): pass\n"
    ),
}


def test_the_allowance_is_refused_on_a_machine_tier_and_without_a_reason(tmp_path: Path) -> None:
    done = run(write(tmp_path, REFUSED), **{tier_guard.ENV: "1"})
    assert done.returncode == 1, done.stdout + done.stderr
    report = done.stdout.split("skipped tests fail this run", 1)[1]
    assert "1 skipped, 3 refused" in report
    assert (
        "tests/integration/test_box.py::test_box: skip_allowed on a test of tests/integration"
        in report
    )
    assert "tests/unit/test_pure.py::test_no_reason: skip_allowed without a reason" in report
    assert "test_pure.py::test_rootfs: skip_allowed on a test of @pytest.mark.rootfs" in report
    assert "test_skipped_on_purpose" not in report  # its allowance is granted


def guard_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The guard's summary section, its lines sorted (workers finish in any order), without
    pytest's own last line (its duration differs)."""
    section = done.stdout.split("skipped tests fail this run", 1)[1]
    lines = section.splitlines()[1:]
    return sorted(line for line in lines if line.startswith(("under CI", "  ")))


# Three pytest processes per xdist run on a machine that may be running the suite on two workers.
@pytest.mark.timeout(240)
@pytest.mark.parametrize("files", [SUITE, REFUSED], ids=["skips", "refused-allowances"])
def test_on_two_xdist_workers_the_verdict_and_summary_are_the_same(
    tmp_path: Path, files: dict[str, str]
) -> None:
    where = write(tmp_path, files)
    serial = run(where, timeout=100, **{tier_guard.ENV: "1"})
    workers = run(where, "-n", "2", timeout=100, **{tier_guard.ENV: "1"})
    assert serial.returncode == workers.returncode == 1, serial.stdout + workers.stdout
    assert guard_lines(serial), serial.stdout
    assert guard_lines(workers) == guard_lines(serial), serial.stdout + workers.stdout
    assert "test_skipped_on_purpose" not in workers.stdout.split("fail this run", 1)[1]


def test_a_run_that_did_not_pass_keeps_its_exit_status(tmp_path: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "tests/e2e/test_x.py": (
            "import pytest\n\n"
            "def test_fails(): assert False\n"
            "def test_interrupts(): raise KeyboardInterrupt\n"
        ),
    }
    done = run(write(tmp_path, files), **{tier_guard.ENV: "1"})
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"CI": "true"}, True),
        ({"CI": "1"}, True),
        ({"CI": "false"}, False),
        ({"CI": ""}, False),
        ({tier_guard.ENV: "1"}, True),
        ({tier_guard.ENV: "yes"}, True),
        ({tier_guard.ENV: "0", "CI": "true"}, False),
        ({tier_guard.ENV: "", "CI": "true"}, True),
    ],
)
def test_when_the_guard_is_on(env: dict[str, str], expected: bool) -> None:
    assert tier_guard.required(env) is expected
