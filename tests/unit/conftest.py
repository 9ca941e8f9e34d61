"""Unit tests are pure and fast: each gets a much shorter timeout than the suite default
(``timeout`` in pyproject.toml) unless it is marked ``@pytest.mark.timeout(seconds)`` itself."""

from __future__ import annotations

from pathlib import Path

import pytest

# The slowest unit test takes about a second on a loaded 2-core machine.
UNIT_TIMEOUT_SECONDS = 30
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A conftest's collection hook sees the whole session's items: only ours get the limit.
    for item in items:
        if item.path.is_relative_to(HERE) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_SECONDS))
