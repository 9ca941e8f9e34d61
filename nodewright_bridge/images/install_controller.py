"""Runs inside the controller image build (the image's own Python, no network): make the venv at
/opt/nwb from the build context's wheels, exactly the lock's set, then the project's wheel.

Only the standard library is used here: nothing else exists yet when it runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

PREFIX = Path("/opt/nwb")
CONTEXT = Path("/ctx")
# Installed with its package but never imported by the controller or the CLI: Ansible's test tool.
PRUNED = ("ansible_test",)


def main() -> int:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(PREFIX)
    python = str(PREFIX / "bin" / "python")
    pip_wheel = next((CONTEXT / "wheels").glob("pip-*.whl"))
    pip = [python, f"{pip_wheel}/pip", "install", "--no-index", "--no-cache-dir"]
    pip += ["--disable-pip-version-check", "--no-deps", "--find-links", str(CONTEXT / "wheels")]
    subprocess.run([*pip, "--require-hashes", "-r", str(CONTEXT / "requirements.lock")], check=True)
    project = next((CONTEXT / "dist").glob("nodewright_bridge-*.whl"))
    subprocess.run([*pip, str(project)], check=True)
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for relative in PRUNED:
        shutil.rmtree(site / relative, ignore_errors=True)
    print(f"installed into {PREFIX} ({sysconfig.get_python_version()})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
