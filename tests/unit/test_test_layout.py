"""Test modules need unique basenames: pytest imports them by basename (no __init__.py here), so a
second ``test_x.py`` anywhere stops collection of the whole suite in CI."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_module_basename_is_unique() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for base in (ROOT / "tests", ROOT / "collections"):
        for path in base.rglob("test_*.py"):
            if "output" in path.parts or "__pycache__" in path.parts:
                continue
            seen[path.name].append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
