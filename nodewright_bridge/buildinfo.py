"""Which build of nodewright-bridge is running: its version and the commit it was built from.

Why: ``nwb --version`` and the controller image's labels must name the same build, so a user
can tell from either what runs. The version has one home, ``nodewright_bridge.__version__``
(pyproject.toml reads it; the chart's appVersion is tested against it). The revision is the
``REVISION`` file an image build writes into the package; in a checkout it is asked from git
(``-dirty`` when tracked files differ from the commit); elsewhere it is ``unknown``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from nodewright_bridge import __version__

REVISION_FILE = Path(__file__).with_name("REVISION")
UNKNOWN = "unknown"


def git_revision(directory: Path) -> str:
    """The commit of the git work tree holding ``directory`` (``<sha>-dirty`` when tracked files
    were changed), or ``unknown`` outside a work tree."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, check=False
        )

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return UNKNOWN
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except OSError:  # no git
        return UNKNOWN
    return head.stdout.strip() + ("-dirty" if dirty else "")


def revision() -> str:
    """The revision this code was built from (see the module docstring for where it comes from)."""
    if REVISION_FILE.is_file():
        return REVISION_FILE.read_text(encoding="utf-8").strip() or UNKNOWN
    return git_revision(Path(__file__).parent)


def version_line() -> str:
    """What ``nwb --version`` prints."""
    return f"nwb {__version__} (revision {revision()})"
