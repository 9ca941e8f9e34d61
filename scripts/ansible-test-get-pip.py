# Stand-in for ansible-test's pip bootstrap script (its download host is unreachable here):
# install the stdlib's bundled pip, then the pinned pip from PyPI.
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
PIN = "pip==24.2"
subprocess.check_call(
    [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", PIN]
)
