"""The pure parts of the image builds: which Debian packages the slim Python base takes, and how
the lock file is read."""

from __future__ import annotations

import pytest

from nodewright_bridge.images.lockfile import constraints_text, normalize, parse_lock
from nodewright_bridge.images.python_base import dependency_closure, installed_packages
from playbook_adapter.imaging import ImageError

STATUS = """\
Package: python3.11-minimal
Status: install ok installed
Version: 3.11.2-6
Pre-Depends: libc6 (>= 2.36)
Depends: libpython3.11-minimal (= 3.11.2-6), libexpat1 (>= 2.1~beta3), zlib1g (>= 1:1.2.0)

Package: libpython3.11-minimal
Status: install ok installed
Version: 3.11.2-6
Depends: libc6 (>= 2.14), libssl3 (>= 3.0.0)

Package: libpython3.11-stdlib
Status: install ok installed
Version: 3.11.2-6
Depends: mime-support | media-types, tzdata, libffi8 (>= 3.4)

Package: media-types
Status: install ok installed
Version: 10.0.0
Provides: mime-support

Package: tzdata
Status: install ok installed
Version: 2024a
Depends: debconf (>= 0.5) | debconf-2.0

Package: debconf
Status: install ok installed
Version: 1.5.82
Pre-Depends: perl-base (>= 5.20.1-3~)

Package: perl-base
Status: install ok installed
Version: 5.36.0

Package: libc6
Status: install ok installed
Version: 2.36-9
Depends: libgcc-s1

Package: libgcc-s1
Status: install ok installed
Version: 12.2.0

Package: libexpat1
Status: install ok installed
Version: 2.5.0

Package: zlib1g
Status: install ok installed
Version: 1:1.2.13

Package: libssl3
Status: install ok installed
Version: 3.0.11

Package: libffi8
Status: install ok installed
Version: 3.4.4

Package: apt
Status: deinstall ok config-files
Version: 2.6.1
"""


def test_the_closure_follows_dependencies_and_alternatives_but_leaves_system_config_out() -> None:
    packages = installed_packages(STATUS)
    assert "apt" not in packages  # only its config files are left
    chosen = {
        p.name for p in dependency_closure(packages, ["python3.11-minimal", "libpython3.11-stdlib"])
    }
    assert chosen == {
        "python3.11-minimal",
        "libpython3.11-minimal",
        "libpython3.11-stdlib",
        "media-types",  # the installed alternative, found through what it provides
        "libc6",
        "libgcc-s1",
        "libexpat1",
        "zlib1g",
        "libssl3",
        "libffi8",
    }  # tzdata, debconf and perl-base stay out


def test_a_root_package_that_is_not_installed_is_named() -> None:
    with pytest.raises(ImageError, match=r"python3\.12-minimal is not installed"):
        dependency_closure(installed_packages(STATUS), ["python3.12-minimal"])


LOCK_TEXT = (
    "# python: 3.11\n"
    f"PyYAML==6.0.4 --hash=sha256:{'a' * 64}\n"
    f"typing_extensions==4.16.0 --hash=sha256:{'b' * 64}\n"
)


def test_a_lock_reads_as_pins_and_as_hashless_constraints() -> None:
    lock = parse_lock(LOCK_TEXT)
    assert lock.python == "3.11"
    assert lock.version_of("pyyaml") == "6.0.4"
    assert lock.version_of("typing-extensions") == "4.16.0"
    assert constraints_text(lock) == "PyYAML==6.0.4\ntyping_extensions==4.16.0\n"
    assert normalize("Typing.Extensions") == "typing-extensions"


def test_a_lock_line_without_a_hash_is_refused_naming_the_line() -> None:
    with pytest.raises(ImageError, match=r"line 2: .*make lock"):
        parse_lock("# python: 3.11\nrich==15.0.0\n")
