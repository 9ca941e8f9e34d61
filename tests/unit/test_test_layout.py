"""Test modules need unique basenames: pytest imports them by basename (no __init__.py here), so a
second ``test_x.py`` anywhere stops collection of the whole suite in CI."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WAIT_FOR = re.compile(r"^\s*def wait_for\(", re.MULTILINE)


def test_every_test_module_basename_is_unique() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for base in (ROOT / "tests", ROOT / "collections"):
        for path in base.rglob("test_*.py"):
            if "output" in path.parts or "__pycache__" in path.parts:
                continue
            seen[path.name].append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"


def test_tests_wait_with_the_one_wait_for() -> None:
    """``tests/support/waiting.py`` has the suite's only ``wait_for``; a second copy drifts."""
    copies = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if WAIT_FOR.search(path.read_text()) and path != ROOT / "tests/support/waiting.py"
    ]
    assert not copies, f"use waiting.wait_for instead of defining one in {copies}"
