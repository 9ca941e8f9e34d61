"""The demo's long steps print headlines, never a tool's per-item chatter (debootstrap's ~100
``I: ...`` lines), on a terminal or not."""

from __future__ import annotations

import pytest
from rich.console import Console

from nodewright_bridge.commands.demo import Steps, headline

DEBOOTSTRAP = [
    "building the node base rootfs (bookworm, minbase); cold builds take ~1 minute",
    "I: Configuring libc6:amd64...",
    "I: Configuring python3...",
    "W: Cannot check Release signature; keyring file not available",
    "node base rootfs ready in 52s",
]


@pytest.mark.parametrize("live", [False, True])
def test_a_rootfs_build_shows_no_debootstrap_lines(live: bool) -> None:
    console = Console(record=True, width=160, force_terminal=live)
    steps = Steps(console, live)
    with steps.spinner("node base rootfs") as say:
        for line in DEBOOTSTRAP:
            say(line)
    text = console.export_text()
    assert "I: Configuring" not in text and "W: Cannot" not in text
    if not live:
        assert "building the node base rootfs" in text and "ready in 52s" in text


def test_headlines_are_what_is_not_tool_chatter() -> None:
    assert [headline(line) for line in DEBOOTSTRAP] == [True, False, False, False, True]
