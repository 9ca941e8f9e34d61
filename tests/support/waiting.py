"""The one way a test waits for something: ``wait_for`` polls a check until it holds.

Integration tests use it as it is; the e2e harness binds its own defaults (longer, polling less
often: a controller and its nodes take longer than one API call) with ``functools.partial``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# Generous: a busy 2-core CI box; nothing in the sandbox should need more than a few seconds.
WAIT_SECONDS = 60.0
POLL_SECONDS = 0.1


def wait_for(
    check: Callable[[], Any],
    *,
    timeout: float = WAIT_SECONDS,
    what: str = "",
    interval: float = POLL_SECONDS,
) -> Any:
    """Poll ``check`` until it returns something truthy, which is returned; fail on timeout.

    The failure names ``what`` (or the check) and the last value the check returned.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or check}: {last!r}")
