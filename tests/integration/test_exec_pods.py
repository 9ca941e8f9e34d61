"""Package pods run for real on simulated nodes: exec mode (venv process) and podman (real image).

These drive the runners directly with the kubelet's ContainerSpec (no API server needed): a pod
writes into its own node's root only, its termination message is read back, killing it ends all
it started, and its NW_REBOOT_COMMAND reaches the simulated node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from machine_guard import machine_mounts

from nodewright_bridge.sandbox import rootfs
from nodewright_bridge.sandbox.kubelet.exec_runner import ExecRunner
from nodewright_bridge.sandbox.kubelet.noderoots import NodeRoots
from nodewright_bridge.sandbox.kubelet.nodes import SimNode, new_boot_id
from nodewright_bridge.sandbox.kubelet.podman_runner import PodmanRunner
from nodewright_bridge.sandbox.kubelet.runners import (
    KILLED_EXIT_CODE,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    ContainerSpec,
    ContainerStartError,
    RunningContainer,
    VolumeKind,
    VolumeMount,
)

pytestmark = [
    pytest.mark.rootfs,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, chroot and mounts need root"),
]

IMAGE_REPO = "127.0.0.1:5000/pkgs/demo"
MESSAGE = '{"v": 1, "package": "demo", "version": "1.0.0"}'
POD_SCRIPT = (
    'echo "$NW_NODE" > /host/etc/written-by-pod; '
    "cat /etc/nodewright/vars/vars.json > /host/etc/vars-seen; "
    f"echo '{MESSAGE}' > /dev/termination-log"
)


@pytest.fixture(scope="module")
def roots() -> NodeRoots:
    return NodeRoots(rootfs.ensure_base_rootfs())


@pytest.fixture
def nodes(roots: NodeRoots, tmp_path: Path) -> Iterator[list[SimNode]]:
    made = [SimNode(name=f"node-{i}", labels={}, state_dir=tmp_path / f"node-{i}") for i in (0, 1)]
    for node in made:
        node.state_dir.mkdir()
        roots.prepare(node)
    yield made
    for node in made:
        roots.release(node)


def pod_spec(node: SimNode, image: str, script: str, *, uid: str = "") -> ContainerSpec:
    uid = uid or uuid.uuid4().hex
    pod_dir = node.state_dir / "pods" / uid
    vars_dir = pod_dir / "volumes/vars"
    vars_dir.mkdir(parents=True)
    (vars_dir / "vars.json").write_text('{"swappiness": 13}')
    log = pod_dir / "termination-log"
    log.write_text("")
    return ContainerSpec(
        namespace="nodewright-system",
        pod_name=f"demo-{uid[:6]}",
        pod_uid=uid,
        node_name=node.name,
        name="agent",
        image=image,
        command=("sh", "-c"),
        args=(script,),
        env={"NW_NODE": node.name, "NW_HOST_ROOT": "/host"},
        volume_mounts=(
            VolumeMount(name="host", kind=VolumeKind.HOST_PATH, mount_path="/host", host_path="/"),
            VolumeMount(
                name="vars",
                kind=VolumeKind.CONFIG_MAP,
                mount_path="/etc/nodewright/vars",
                read_only=True,
                source=vars_dir,
            ),
        ),
        privileged=True,
        host_pid=True,
        host_network=True,
        restart_policy="Never",
        termination_log=log,
        scratch_dir=pod_dir / "agent",
        pod_labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE},
    )


def wait(container: RunningContainer, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while (code := container.poll()) is None:
        assert time.monotonic() < deadline, "container did not end"
        time.sleep(0.05)
    return code


def output(spec: ContainerSpec) -> str:
    assert spec.scratch_dir is not None
    return (spec.scratch_dir / "output.log").read_text()


def assert_written_on_node_only(nodes: list[SimNode], roots: NodeRoots) -> None:
    first, second = nodes
    assert first.root_dir is not None and second.root_dir is not None
    assert (first.root_dir / "etc/written-by-pod").read_text() == "node-0\n"
    assert (first.root_dir / "etc/vars-seen").read_text() == '{"swappiness": 13}'
    assert not (second.root_dir / "etc/written-by-pod").exists()
    assert not (roots.base() / "etc/written-by-pod").exists()
    assert not Path("/etc/written-by-pod").exists()
    assert not Path("/host").exists()


@pytest.fixture
def package_dir(tmp_path: Path) -> Path:
    package = tmp_path / "package"
    package.mkdir()
    (package / "nodewright-package.yaml").write_text("name: demo\nversion: 1.0.0\n")
    return package


def test_an_exec_pod_writes_into_its_node_root_only_and_its_message_is_read_back(
    nodes: list[SimNode], roots: NodeRoots, package_dir: Path
) -> None:
    runner = ExecRunner({IMAGE_REPO: package_dir}, roots=roots)
    script = f"{POD_SCRIPT}; cat $NW_PACKAGE_DIR/nodewright-package.yaml; command -v nwb-agent"
    spec = pod_spec(nodes[0], f"{IMAGE_REPO}:1.0.0", script)
    container = runner.start(nodes[0], spec)
    assert wait(container) == 0, output(spec)
    assert container.termination_message() == MESSAGE + "\n"
    assert_written_on_node_only(nodes, roots)
    assert "name: demo" in output(spec)
    assert output(spec).strip().endswith("/bin/nwb-agent")  # from this repo's venv


def test_an_exec_pod_with_an_unknown_image_fails_to_start(
    nodes: list[SimNode], roots: NodeRoots
) -> None:
    runner = ExecRunner({}, roots=roots)
    with pytest.raises(ContainerStartError) as failed:
        runner.start(nodes[0], pod_spec(nodes[0], "example.invalid/other:1", "true"))
    assert failed.value.reason == "ErrImagePull"


def test_killing_an_exec_pod_ends_everything_it_started(
    nodes: list[SimNode], roots: NodeRoots, package_dir: Path
) -> None:
    runner = ExecRunner({IMAGE_REPO: package_dir}, roots=roots)
    suffix = uuid.uuid4().hex[:8]
    marker = f"nwb-kill-{suffix}"
    # bash's exec -a names the background sleep after the marker (dash, the node's sh, has no
    # -a); the script spells the marker only as "$m-...", so only that sleep matches it.
    script = f'm=nwb-kill; bash -c "exec -a $m-{suffix} sleep 300" & wait'
    spec = pod_spec(nodes[0], f"{IMAGE_REPO}:1", script)
    container = runner.start(nodes[0], spec)
    deadline = time.monotonic() + 30
    while subprocess.run(["pgrep", "-f", marker], capture_output=True, check=False).returncode != 0:
        assert time.monotonic() < deadline and container.poll() is None, output(spec)
        time.sleep(0.05)
    container.kill()
    assert container.poll() == KILLED_EXIT_CODE
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True, check=False).returncode == 1


def test_the_reboot_command_reaches_the_node_and_a_reboot_empties_its_run(
    nodes: list[SimNode], roots: NodeRoots, package_dir: Path
) -> None:
    node = nodes[0]
    runner = ExecRunner({IMAGE_REPO: package_dir}, roots=roots)
    spec = pod_spec(
        node, f"{IMAGE_REPO}:1", 'echo kept > /host/run/flag; eval "$NW_REBOOT_COMMAND"'
    )
    assert wait(runner.start(node, spec)) == 0, output(spec)
    assert node.reboot_request_file is not None and node.reboot_request_file.is_file()
    # What the kubelet does on seeing the file: delete it and give the node a new boot id.
    node.reboot_request_file.unlink()
    node.boot_id = new_boot_id()
    after = pod_spec(node, f"{IMAGE_REPO}:1", "test ! -e /host/run/flag; "
                     "cat /host/proc/sys/kernel/random/boot_id")  # fmt: skip
    assert wait(runner.start(node, after)) == 0, output(after)
    assert output(after).strip() == node.boot_id


# --- podman ----------------------------------------------------------------------------------

PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")


@pytest.fixture(scope="module")
def pod_image(roots: NodeRoots, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A tiny real image: the node base rootfs imported, plus one script layer built on it."""
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: run `make system-deps`")
    base = roots.base()
    base_image = f"localhost/nwb-test-base:{base.name}"
    if subprocess.run([*PODMAN, "image", "exists", base_image], check=False).returncode != 0:
        tar = subprocess.Popen(["tar", "-C", str(base), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run([*PODMAN, "import", "-q", "-", base_image], stdin=tar.stdout, check=True)
        assert tar.wait() == 0
    context = tmp_path_factory.mktemp("image")
    (context / "pod.sh").write_text(f"#!/bin/sh\nset -e\n{POD_SCRIPT}\n")
    (context / "Containerfile").write_text(
        f"FROM {base_image}\nCOPY pod.sh /usr/local/bin/nwb-test-pod\n"
        "RUN chmod 755 /usr/local/bin/nwb-test-pod\n"
    )
    image = f"localhost/nwb-test-pod:{uuid.uuid4().hex[:10]}"
    subprocess.run([*PODMAN, "build", "-q", "-t", image, str(context)], check=True,
                   capture_output=True)  # fmt: skip
    yield image
    subprocess.run([*PODMAN, "rmi", "-f", image], capture_output=True, check=False)


def test_a_podman_pod_runs_its_real_image_on_its_node_root_only(
    nodes: list[SimNode], roots: NodeRoots, pod_image: str
) -> None:
    runner = PodmanRunner(roots=roots, pull="never")  # the image exists only in local storage
    spec = pod_spec(nodes[0], pod_image, "")
    spec = ContainerSpec(**{**_fields(spec), "command": ("nwb-test-pod",), "args": ()})
    container = runner.start(nodes[0], spec)
    assert wait(container) == 0, output(spec)
    assert container.termination_message() == MESSAGE + "\n"
    assert_written_on_node_only(nodes, roots)


def test_a_sysctl_and_a_remount_in_a_podman_pod_change_only_its_node(
    nodes: list[SimNode], roots: NodeRoots, pod_image: str
) -> None:
    before = Path("/proc/sys/vm/swappiness").read_text()
    mounts_before = machine_mounts()
    wanted = "3" if before.strip() != "3" else "4"
    runner = PodmanRunner(roots=roots, pull="never")
    spec = pod_spec(nodes[0], pod_image, f"chroot /host sysctl -w vm.swappiness={wanted}; "
                    "chroot /host mount -o remount,hidepid=2 /proc; "
                    "chroot /host mount -o remount,nosuid,nodev,noexec /run && "
                    "chroot /host mountpoint -q /tmp && "
                    "cat /host/proc/sys/vm/swappiness")  # fmt: skip
    try:
        assert wait(runner.start(nodes[0], spec)) == 0, output(spec)
        assert output(spec).strip().endswith(wanted)
        assert Path("/proc/sys/vm/swappiness").read_text() == before
        assert machine_mounts() == mounts_before
    finally:
        Path("/proc/sys/vm/swappiness").write_text(before)


def _fields(spec: ContainerSpec) -> dict[str, object]:
    return {name: getattr(spec, name) for name in spec.__dataclass_fields__}
