"""Per-node isolation: what a role does to a simulated node never reaches the real machine.

The hazard: through a chroot alone, a role's mounts and sysctls reach the machine's own kernel.
The proof that they do not here: a role that mounts /proc with hidepid (like a common hardening
role) and sets sysctls, run with real ansible-runner and the community.general.chroot connection
into a node root, changes only that node: the machine's /proc/sys values stay as they were and no
mount is left behind. And, as on a
real node, /proc, /sys, /dev, /dev/shm, /run and /tmp are mount points in every view, so a
hardening role's remounts of /run and /dev/shm work there, again without touching the machine.
Even a remount without ``bind`` (which reconfigures the file system behind a mount) reaches only
the node's own file systems: each per-node directory a view shows is one of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from machine_guard import host_sysctl, machine_mount_flags, machine_mounts, mount_options

from nodewright_bridge.sandbox import isolation, rootfs

pytestmark = [
    pytest.mark.rootfs,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, chroot and mounts need root"),
]

VENV_BIN = Path(sys.executable).parent
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
# The sysctls the test role sets; the values differ from any machine default we know of.
SWAPPINESS = "vm/swappiness"
IP_FORWARD = "net/ipv4/ip_forward"
DMESG_RESTRICT = "kernel/dmesg_restrict"
STANDARD_MOUNTS = ("/proc", "/sys", "/dev", "/dev/shm", "/run", "/tmp")
HARDENED = {"nosuid", "nodev", "noexec"}
# A hardening-style test role of the e2e suite (remounts /run and /dev/shm, persists a sysctl).
HARDEN_MOUNTS_ROLE = Path(__file__).resolve().parents[1] / "e2e/roles/harden-mounts"


@pytest.fixture
def host_sysctls_guarded() -> Iterator[dict[str, str]]:
    """The machine's values before the test; restored (and the test failed) if they changed."""
    before = {rel: host_sysctl(rel) for rel in (SWAPPINESS, IP_FORWARD, DMESG_RESTRICT)}
    yield before
    changed = {rel: host_sysctl(rel) for rel in before if host_sysctl(rel) != before[rel]}
    for rel in changed:
        (Path("/proc/sys") / rel).write_text(before[rel] + "\n")
    assert not changed, f"the real machine's sysctls changed: {changed}"


def mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    with open("/proc/self/mountinfo") as handle:
        points = [line.split()[4] for line in handle]
    return [p for p in points if p.startswith(prefix)]


def own_mounts(root: Path) -> list[str]:
    """What stays mounted under a node root on the machine's side: the root and its per-boot
    /run and /tmp (nothing a command mounted inside)."""
    return [str(root.resolve()), f"{root.resolve()}/run", f"{root.resolve()}/tmp"]


def root_in_view(view: isolation.View, root: Path) -> str:
    """Where the node root is in ``view`` ("" for ``/``), as ``run_on_node`` runs it."""
    return {
        isolation.View.HOST: str(root.resolve()),
        isolation.View.NODE: "",
        isolation.View.CONTAINER: "/host",
    }[view]


def run_on_node(
    root: Path, state: Path, script: str, view: isolation.View = isolation.View.NODE
) -> subprocess.CompletedProcess[bytes]:
    proc = isolation.run_isolated(
        root, state, ["sh", "-ec", script], env=ENV, view=view, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


HARDENING_TASKS = """\
- name: Hide other users' processes (as OS hardening roles do)
  ansible.posix.mount:
    path: /proc
    src: proc
    fstype: proc
    opts: rw,nosuid,nodev,noexec,relatime,hidepid=2
    state: mounted
- name: Tune swappiness
  ansible.posix.sysctl:
    name: vm.swappiness
    value: "13"
    state: present
    sysctl_set: true
    reload: true
- name: Flip IPv4 forwarding
  ansible.posix.sysctl:
    name: net.ipv4.ip_forward
    value: "{{ wanted_forward }}"
    state: present
    sysctl_set: true
"""

RUNNER_SCRIPT = """\
import json, sys
import ansible_runner
args = json.loads(sys.argv[1])
result = ansible_runner.run(
    private_data_dir=args["pdd"],
    playbook="site.yml",
    inventory={"all": {"hosts": {"node": {
        "ansible_connection": "community.general.chroot",
        "ansible_host": args["root"],
        "ansible_python_interpreter": "/usr/bin/python3",
    }}}},
    extravars=args["extravars"],
    quiet=True,
)
failed = [e["event_data"].get("task") for e in result.events if e["event"] == "runner_on_failed"]
print(json.dumps({"status": result.status, "rc": result.rc, "failed": failed}))
sys.exit(0 if result.status == "successful" else 1)
"""


def run_play(root: Path, state: Path, tmp_path: Path, site: str, extravars: dict[str, str]) -> None:
    """Run ``site`` (roles already under ``tmp_path/pdd/project/roles``) with real ansible-runner
    and the chroot connection into the node root, from the isolation's HOST view."""
    pdd = tmp_path / "pdd"
    (pdd / "project").mkdir(parents=True, exist_ok=True)
    (pdd / "project/site.yml").write_text(site)
    script = tmp_path / "run_role.py"
    script.write_text(RUNNER_SCRIPT)
    env = {**ENV, "PATH": f"{VENV_BIN}:{ENV['PATH']}", "HOME": str(tmp_path)}
    args = json.dumps({"pdd": str(pdd), "root": str(root), "extravars": extravars})
    proc = isolation.run_isolated(
        root, state, [sys.executable, str(script), args], env=env, view=isolation.View.HOST,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (out.decode()[-3000:], err.decode()[-3000:])


def test_a_role_mounting_proc_and_setting_sysctls_changes_only_the_simulated_node(
    node_root: tuple[Path, Path], tmp_path: Path, host_sysctls_guarded: dict[str, str]
) -> None:
    root, state = node_root
    forward = "0" if host_sysctls_guarded[IP_FORWARD] == "1" else "1"
    roles = tmp_path / "pdd/project/roles"
    (roles / "harden/tasks").mkdir(parents=True)
    (roles / "harden/tasks/main.yml").write_text(HARDENING_TASKS)
    site = "- hosts: all\n  gather_facts: true\n  roles: [harden]\n"
    run_play(root, state, tmp_path, site, {"wanted_forward": forward})

    # The machine: unchanged kernel settings, no mount left under the node root but the root.
    assert host_sysctl(SWAPPINESS) == host_sysctls_guarded[SWAPPINESS]
    assert host_sysctl(IP_FORWARD) == host_sysctls_guarded[IP_FORWARD]
    assert mounts_under(root) == own_mounts(root)
    assert "hidepid" not in Path("/etc/fstab").read_text()
    # The node: its fstab and sysctl.conf were written, and its own /proc/sys has the values.
    assert "hidepid=2" in (root / "etc/fstab").read_text()
    assert "vm.swappiness=13" in (root / "etc/sysctl.conf").read_text()
    seen = run_on_node(
        root, state, "cat /proc/sys/vm/swappiness /proc/sys/net/ipv4/ip_forward; mount"
    )
    assert seen.returncode == 0, seen.stderr
    lines = seen.stdout.decode().splitlines()
    assert lines[:2] == ["13", forward]  # the next pod on this node sees what the role set


HARDEN_SITE = """\
- hosts: all
  gather_facts: true
  roles: [harden-mounts]
  tasks:
    - name: Check what the role did, as its verify stage does
      ansible.builtin.include_role:
        name: harden-mounts
        tasks_from: verify
"""


def test_a_hardening_role_remounting_run_and_dev_shm_changes_only_the_simulated_node(
    node_root: tuple[Path, Path], tmp_path: Path, host_sysctls_guarded: dict[str, str]
) -> None:
    root, state = node_root
    machine_before = machine_mounts()
    dmesg = "0" if host_sysctls_guarded[DMESG_RESTRICT] == "1" else "1"
    shutil.copytree(HARDEN_MOUNTS_ROLE, tmp_path / "pdd/project/roles/harden-mounts")
    # The role's own verify asserts the six mount points (findmnt), the options and the value.
    run_play(root, state, tmp_path, HARDEN_SITE, {"harden_mounts_dmesg_restrict": dmesg})

    assert machine_mounts() == machine_before
    assert host_sysctl(DMESG_RESTRICT) == host_sysctls_guarded[DMESG_RESTRICT]
    assert mounts_under(root) == own_mounts(root)
    dropin = root / "etc/sysctl.d/60-nwb-harden-mounts.conf"
    assert f"kernel.dmesg_restrict={dmesg}" in dropin.read_text().splitlines()
    # The next command on the node: the setting is kept; the remount lasted for that run only.
    seen = run_on_node(root, state, "cat /proc/sys/kernel/dmesg_restrict /proc/self/mountinfo")
    assert seen.returncode == 0, seen.stderr
    value, _, mountinfo = seen.stdout.decode().partition("\n")
    assert value == dmesg
    assert "noexec" not in mount_options(mountinfo)["/run"]


@pytest.mark.parametrize("view", list(isolation.View))
def test_standard_dirs_are_mount_points_and_a_remount_stays_in_the_namespace(
    view: isolation.View, node_root: tuple[Path, Path], host_sysctls_guarded: dict[str, str]
) -> None:
    root, state = node_root
    at = root_in_view(view, root)
    dmesg = "0" if host_sysctls_guarded[DMESG_RESTRICT] == "1" else "1"
    machine_before = machine_mounts()
    done = run_on_node(
        root,
        state,
        f"cat /proc/self/mountinfo; echo ==; echo {dmesg} > {at}/proc/sys/kernel/dmesg_restrict; "
        f"mount -o remount,nosuid,nodev,noexec {at}/run; "
        f"mount -o remount,nosuid,nodev,noexec {at}/dev/shm; cat /proc/self/mountinfo",
        view,
    )
    assert done.returncode == 0, done.stderr
    first, _, second = done.stdout.decode().partition("==\n")
    shown, remounted = mount_options(first), mount_options(second)
    assert {at + path for path in STANDARD_MOUNTS} <= shown.keys()
    assert {"nosuid", "nodev"} <= shown[f"{at}/run"] and "noexec" not in shown[f"{at}/run"]
    assert remounted[f"{at}/run"] >= HARDENED and remounted[f"{at}/dev/shm"] >= HARDENED

    assert machine_mounts() == machine_before
    assert host_sysctl(DMESG_RESTRICT) == host_sysctls_guarded[DMESG_RESTRICT]
    assert mounts_under(root) == own_mounts(root)
    assert (state / isolation.PROC_SYS_DIR / DMESG_RESTRICT).read_text().strip() == dmesg


def test_stacked_proc_remount_inside_keeps_the_stand_in(
    node_root: tuple[Path, Path], host_sysctls_guarded: dict[str, str]
) -> None:
    root, state = node_root
    done = run_on_node(
        root,
        state,
        "mount -o remount,hidepid=2 /proc; echo 7 > /proc/sys/vm/swappiness; "
        "cat /proc/sys/vm/swappiness; cat /proc/sys/kernel/random/boot_id; hostname",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().split() == ["7", "boot-1", "nwb-node"]
    assert host_sysctl(SWAPPINESS) == host_sysctls_guarded[SWAPPINESS]


def test_commands_see_a_private_pid_namespace_and_only_harmless_devices(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    done = run_on_node(root, state, "ls /proc | grep -c '^[0-9]' ; ls /dev")
    assert done.returncode == 0, done.stderr
    count, *devices = done.stdout.decode().split()
    assert int(count) <= 5  # init, sh, ls, grep: nothing of the machine's
    assert "vda" not in devices and "kmsg" not in devices
    assert {"null", "zero", "urandom", "tty", "pts", "shm"} <= set(devices)


def test_run_and_tmp_are_kept_per_node_and_emptied_by_a_simulated_reboot(
    node_root: tuple[Path, Path], base_rootfs: Path, tmp_path: Path
) -> None:
    root, state = node_root
    other = rootfs.mount_node_root(base_rootfs, tmp_path / "other")
    other_state = tmp_path / "other/isolation"
    isolation.prepare_node(other.path, other_state, "boot-1")
    try:
        # Written under a hardened remount; an umount uncovers the same files.
        first = run_on_node(
            root,
            state,
            "mount -o remount,nosuid,nodev,noexec /run; echo x > /run/flag; echo t > /tmp/flag; "
            "umount /run; cat /run/flag; umount /tmp; cat /tmp/flag",
        )
        assert (first.returncode, first.stdout) == (0, b"x\nt\n"), first.stderr
        assert (root / "run/flag").read_text() == "x\n"  # where the kubelet looks from outside
        kept = run_on_node(root, state, "cat /run/flag /tmp/flag; mountpoint -q /run")
        assert (kept.returncode, kept.stdout) == (0, b"x\nt\n"), kept.stderr
        assert run_on_node(other.path, other_state, "test ! -e /run/flag").returncode == 0
        # A runtime-only sysctl and one from the node's sysctl config; then a reboot.
        (root / "etc/sysctl.d").mkdir(exist_ok=True)
        (root / "etc/sysctl.d/90-test.conf").write_text("vm.swappiness = 21\n")
        assert run_on_node(root, state, "echo 55 > /proc/sys/vm/dirty_ratio").returncode == 0
        dirty_before = host_sysctl("vm/dirty_ratio")
        assert isolation.prepare_node(root, state, "boot-2") is True
        after = run_on_node(
            root,
            state,
            "test ! -e /run/flag; test ! -e /tmp/flag; test -k /tmp; "
            "cat /proc/sys/vm/swappiness /proc/sys/vm/dirty_ratio "
            "/proc/sys/kernel/random/boot_id",
        )
        assert after.returncode == 0, after.stderr
        assert after.stdout.decode().split() == ["21", dirty_before, "boot-2"]
        assert isolation.prepare_node(root, state, "boot-2") is False  # same boot: kept
    finally:
        isolation.release_node(other.path, other_state)
        rootfs.unmount_node_root(other, remove=True)


def test_container_view_shows_the_node_root_at_host_and_discards_other_writes(
    node_root: tuple[Path, Path], tmp_path: Path
) -> None:
    root, state = node_root
    volume = tmp_path / "vars"
    volume.mkdir()
    (volume / "vars.json").write_text("{}")
    log = tmp_path / "termination-log"
    log.write_text("")
    proc = isolation.run_isolated(
        root,
        state,
        [
            "sh",
            "-ec",
            textwrap.dedent("""\
            echo node > /host/etc/from-container
            echo machine > /etc/not-on-the-machine
            cat /etc/nodewright/vars/vars.json
            echo done > /dev/termination-log
            """),
        ],
        env=ENV,
        binds=[
            isolation.Bind(volume, "/etc/nodewright/vars", read_only=True),
            isolation.Bind(log, "/dev/termination-log"),
        ],
        view=isolation.View.CONTAINER,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == b"{}"
    assert (root / "etc/from-container").read_text() == "node\n"
    assert not Path("/etc/not-on-the-machine").exists()
    assert not Path("/etc/nodewright").exists() and not Path("/host").exists()
    assert log.read_text() == "done\n"


def test_killing_the_isolated_process_ends_everything_inside(node_root: tuple[Path, Path]) -> None:
    root, state = node_root
    # A duration no other process on the machine uses, so pgrep sees only this test's sleepers.
    marker = f"sleep 300.{os.getpid()}{time.monotonic_ns() % 1000:03d}"
    proc = isolation.run_isolated(
        root, state, ["sh", "-c", f"{marker} & {marker} & echo started; wait"], env=ENV,
        view=isolation.View.NODE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"started\n"
    proc.kill()
    proc.wait(10)
    # The kernel kills the rest of the PID namespace when its init dies, but not synchronously
    # with reaping the init: give it a moment, then nothing may be left.
    deadline = time.monotonic() + 5
    while True:
        leftover = subprocess.run(["pgrep", "-f", marker], capture_output=True, check=False)
        if leftover.stdout == b"" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert leftover.stdout == b""


# --- a remount without `bind` reconfigures a file system: only ever one of the node's own ------

# Read-only, without `bind`: each reconfigures the file system behind the mount it names.
REMOUNTED_RO = ("/sys", "/proc/sys", "/run", "/tmp", "/")


def findmnt_target(path: Path) -> tuple[str, str]:
    """(MAJ:MIN, mount point) of the file system holding ``path``, as findmnt sees it here."""
    done = subprocess.run(
        ["findmnt", "--noheadings", "--output", "MAJ:MIN,TARGET", "--target", str(path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    device, target = done.stdout.splitlines()[-1].split(maxsplit=1)
    return device, target


def require_per_node_filesystems(root: Path, state: Path) -> list[Path]:
    """The node's own file systems a view shows; FAILS the test (no remount is ever tried) unless
    each is a mount point of its own, on another device than this machine's root and the file
    system holding the sandbox state - checked with findmnt and stat, not with the code under
    test. Were one a bind of a directory on this machine's disk, the remount would make it
    read-only."""
    machine = {findmnt_target(Path("/"))[0], findmnt_target(state)[0]}
    machine_dev = {os.stat("/").st_dev, os.stat(state).st_dev}
    per_node = [
        root,
        root / "run",
        root / "tmp",
        state / isolation.PROC_SYS_DIR,
        state / isolation.SYS_DIR,
    ]
    problems = []
    for path in per_node:
        device, target = findmnt_target(path)
        if (
            target != str(path.resolve())
            or device in machine
            or os.stat(path).st_dev in machine_dev
        ):
            problems.append(f"{path} is on {device}, mounted at {target}")
    if problems:
        pytest.fail(
            "refusing to remount: per-node state is not on file systems of its own, so a remount "
            "without bind would reach this machine's disk:\n  " + "\n  ".join(problems)
        )
    return per_node


def write_and_remove(directory: Path) -> None:
    probe = directory / f".nwb-probe-{os.getpid()}"
    probe.write_text("writable\n")
    probe.unlink()


def remount_read_only_and_check(root: Path, state: Path, view: isolation.View) -> None:
    """The proof: a role's ``mount -o remount,ro`` (no bind) of each of ``REMOUNTED_RO`` in
    ``view`` succeeds and makes that node file system read-only - and only that one."""
    per_node = require_per_node_filesystems(root, state)
    holding = findmnt_target(state)[1]
    flags_before = machine_mount_flags(extra=(holding,))
    at = root_in_view(view, root)
    # Every device this machine's mounts use, but the node's own: the last guard runs inside the
    # view, right before the remount, on the very mount it would reconfigure.
    own = {findmnt_target(path)[0] for path in per_node}
    with open("/proc/self/mountinfo") as handle:
        forbidden = {line.split()[2] for line in handle} - own
    targets = " ".join(f"{at}{path}".rstrip("/") or "/" for path in REMOUNTED_RO)
    done = run_on_node(
        root,
        state,
        f"""
        for t in {targets}; do
          d=$(findmnt --noheadings --output MAJ:MIN --mountpoint "$t" | tail -n 1)
          case "$d" in "") echo "refusing: $t is not a mount point" >&2; exit 99 ;; esac
          case " {" ".join(sorted(forbidden))} " in
            *" $d "*) echo "refusing: $t is on $d, a file system of this machine" >&2; exit 99 ;;
          esac
        done
        for t in {targets}; do mount -o remount,ro "$t"; done
        for t in {targets}; do
          if touch "$t/.nwb-probe" 2>/dev/null; then echo "$t is still writable" >&2; exit 1; fi
        done
        """,
        view,
    )
    assert done.returncode == 0, done.stderr.decode()
    # This machine: its root and the file system holding the sandbox state still take writes,
    # and none of its mounts changed an option.
    write_and_remove(Path("/"))
    write_and_remove(state)
    assert machine_mount_flags(extra=(holding,)) == flags_before
    # The node: its own file systems went read-only (for every view, until its next boot).
    assert all(os.statvfs(path).f_flag & os.ST_RDONLY for path in per_node)
    assert isolation.prepare_node(root, state, "boot-2") is True
    for path in per_node[1:]:
        write_and_remove(path)


@pytest.mark.parametrize("view", list(isolation.View))
def test_a_remount_read_only_without_bind_changes_only_the_node_own_file_systems(
    view: isolation.View, node_root: tuple[Path, Path]
) -> None:
    root, state = node_root
    remount_read_only_and_check(root, state, view)


def test_a_copied_root_is_a_file_system_of_its_own_too(base_rootfs: Path, tmp_path: Path) -> None:
    node = rootfs.mount_node_root(base_rootfs, tmp_path / "node", copy=True)
    state = tmp_path / "node/isolation"
    try:
        assert node.mode is rootfs.RootMode.COPY
        isolation.prepare_node(node.path, state, "boot-1")
        remount_read_only_and_check(node.path, state, isolation.View.NODE)
    finally:
        isolation.release_node(node.path, state)
        rootfs.unmount_node_root(node, remove=True)
