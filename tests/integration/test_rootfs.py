"""The node base rootfs (debootstrap, cached) and each node's copy-on-write root (overlay, or a
copy in a tmpfs of its own)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodewright_bridge.sandbox import mounts, rootfs

pytestmark = [
    pytest.mark.rootfs,
    pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap, chroot and mounts need root"),
]


@pytest.fixture
def two_nodes(
    base_rootfs: Path, tmp_path: Path
) -> Iterator[tuple[rootfs.NodeRoot, rootfs.NodeRoot]]:
    a = rootfs.mount_node_root(base_rootfs, tmp_path / "node-a")
    b = rootfs.mount_node_root(base_rootfs, tmp_path / "node-b")
    yield a, b
    rootfs.unmount_node_root(a, remove=True)
    rootfs.unmount_node_root(b, remove=True)


def test_base_rootfs_is_a_debian_tree_with_python_and_apt_bindings(base_rootfs: Path) -> None:
    done = subprocess.run(
        [
            "chroot",
            str(base_rootfs),
            "python3",
            "-c",
            "import apt_pkg, sys; print(sys.version_info[0])",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"
    for tool in ("usr/sbin/sysctl", "usr/bin/sudo", "usr/bin/systemctl", "usr/sbin/policy-rc.d"):
        assert (base_rootfs / tool).exists(), tool


def test_second_call_reuses_the_cached_tree(base_rootfs: Path) -> None:
    lines: list[str] = []
    assert rootfs.ensure_base_rootfs(lines.append) == base_rootfs
    assert lines == []  # nothing was built


def test_a_file_written_in_one_node_is_absent_in_another_node_and_the_base(
    two_nodes: tuple[rootfs.NodeRoot, rootfs.NodeRoot], base_rootfs: Path
) -> None:
    a, b = two_nodes
    assert a.mode is rootfs.RootMode.OVERLAY
    (a.path / "etc/written-by-node-a").write_text("a\n")
    (a.path / "etc/hostname").write_text("node-a\n")
    assert not (b.path / "etc/written-by-node-a").exists()
    assert not (base_rootfs / "etc/written-by-node-a").exists()
    assert (b.path / "etc/hostname").read_text() == "nwb-node\n"
    assert (base_rootfs / "etc/hostname").read_text() == "nwb-node\n"


def test_a_node_keeps_its_changes_across_unmount_and_remount(
    base_rootfs: Path, tmp_path: Path
) -> None:
    node = rootfs.mount_node_root(base_rootfs, tmp_path / "node")
    (node.path / "root/kept").write_text("x")
    rootfs.unmount_node_root(node)
    assert not (node.path / "root/kept").exists()
    again = rootfs.mount_node_root(base_rootfs, tmp_path / "node")
    try:
        assert (again.path / "root/kept").read_text() == "x"
    finally:
        rootfs.unmount_node_root(again, remove=True)
    assert not (tmp_path / "node").exists()


def test_a_copied_root_is_a_tmpfs_of_its_own_whose_changes_end_with_it(
    base_rootfs: Path, tmp_path: Path
) -> None:
    node = rootfs.mount_node_root(base_rootfs, tmp_path / "node", copy=True)
    try:
        assert node.mode is rootfs.RootMode.COPY
        assert mounts.private_filesystem(node.path)
        assert [m.fstype for m in mounts.table() if m.point == str(node.path)] == ["tmpfs"]
        assert (node.path / "etc/hostname").read_text() == "nwb-node\n"
        (node.path / "etc/written-by-copy").write_text("c\n")
        assert not (base_rootfs / "etc/written-by-copy").exists()
        assert rootfs.mount_node_root(base_rootfs, tmp_path / "node").mode is rootfs.RootMode.COPY
    finally:
        rootfs.unmount_node_root(node, remove=True)
    assert not (tmp_path / "node").exists()


def test_the_mirror_is_read_from_apts_own_configuration(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://security.invalid/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n"
    )
    assert rootfs.apt_mirror("bookworm", tmp_path) == "http://mirror.invalid/debian"
    with pytest.raises(rootfs.RootfsError):
        rootfs.apt_mirror("trixie", tmp_path)
