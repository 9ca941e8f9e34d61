"""``nwb package build`` for real: podman, a base image made from the sandbox rootfs, a local
registry, and the built image running ``nwb-agent`` against a node root.

No registry on the internet is reachable here, so the base image is the cached debootstrap rootfs
imported into podman (``localhost/nwb-base:<rootfs key>``), and the registry is Debian's
``docker-registry`` on a free loopback port, started by this module.

Isolation of the run: the container is *not* privileged (podman keeps ``/proc/sys`` read-only and
gives it its own mount namespace; ``CAP_SYS_CHROOT`` is in the default set), has no network, and
its ``/host`` is a per-test copy-on-write root over the cached rootfs, not the machine's ``/``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodewright_bridge.cli import main
from playbook_adapter import imaging, introspection

pytestmark = [
    pytest.mark.podman,
    pytest.mark.rootfs,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="rootful podman, debootstrap and mounts need root"
    ),
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is installed by make setup"),
]

EXAMPLE_ROLE = Path(__file__).resolve().parents[2] / "examples" / "roles" / "sysctl-tuning"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's docker-registry on 127.0.0.1:<free port>; yields ``host:port``."""
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip("docker-registry is installed by make setup")
    state = tmp_path_factory.mktemp("registry")
    port = _free_port()
    config = state / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {state / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n",
        encoding="utf-8",
    )
    log = (state / "registry.log").open("wb")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log)
    address = f"127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://{address}/v2/", timeout=1) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail(f"registry did not answer: {(state / 'registry.log').read_text()}")
        yield address
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture(scope="module")
def engine() -> imaging.Engine:
    return imaging.detect_engine("podman")


@pytest.fixture(scope="module")
def base_image(engine: imaging.Engine, base_rootfs: Path) -> str:
    image = f"localhost/nwb-base:{base_rootfs.name}"
    imaging.ensure_rootfs_image(engine, base_rootfs, image)
    return image


@dataclass(frozen=True)
class Built:
    image: str
    archive: Path
    stderr: str


@pytest.fixture(scope="module")
def built(registry: str, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Built:
    work = tmp_path_factory.mktemp("package")
    role = work / "sysctl-tuning"
    shutil.copytree(EXAMPLE_ROLE, role)
    introspection.write_manifest(role, introspection.introspect_role(role, version="1.3.0"))
    archive = work / "sysctl-tuning.oci.tar"
    tag = f"{registry}/pkgs/sysctl-tuning"
    args = ["package", "build", str(role), "--tag", tag, "--base-image", base_image]
    args += ["--push", "--no-tls-verify", "--oci-archive", str(archive)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return Built(image=result.stdout.strip(), archive=archive, stderr=result.stderr)


def test_the_image_carries_oci_labels_our_labels_and_the_package_manifest(
    built: Built, engine: imaging.Engine, registry: str
) -> None:
    assert built.image == f"{registry}/pkgs/sysctl-tuning:1.3.0"
    info = imaging.inspect_image(engine, built.image)
    labels = info.labels
    assert labels["org.opencontainers.image.title"] == "sysctl-tuning"
    assert labels["org.opencontainers.image.version"] == "1.3.0"
    assert labels["org.opencontainers.image.created"].endswith("+00:00")
    assert labels["bridge.nodewright.io/package"] == "sysctl-tuning"
    assert labels["bridge.nodewright.io/version"] == "1.3.0"
    assert labels["bridge.nodewright.io/stages"].split(",")[:2] == ["apply", "upgrade"]
    assert info.manifest is not None
    assert info.manifest.role == "roles/sysctl-tuning"
    assert [c.name for c in info.manifest.collections] == ["ansible.posix"]


def test_the_image_stays_under_300_mb(built: Built, engine: imaging.Engine) -> None:
    size = imaging.image_size(engine, built.image)
    print(f"package image {built.image}: {size / 1e6:.0f} MB")
    assert 0 < size < 300_000_000


def test_the_oci_archive_is_an_oci_layout(built: Built) -> None:
    listing = subprocess.run(
        ["tar", "-tf", str(built.archive)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "oci-layout" in listing and "index.json" in listing


def test_the_pushed_image_pulls_back_and_its_agent_applies_the_role_to_a_node_root(
    built: Built,
    engine: imaging.Engine,
    base_rootfs: Path,
    node_root: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    assert "pushed" in built.stderr
    engine.run(["rmi", "--force", built.image])
    assert not engine.image_exists(built.image)
    imaging.pull_image(engine, built.image, tls_verify=False)

    root, _ = node_root
    (tmp_path / "vars").mkdir()
    (tmp_path / "out").mkdir()
    settings = {"sysctl_tuning_reload": False, "sysctl_tuning_settings": {"vm.swappiness": 7}}
    (tmp_path / "vars" / "vars.json").write_text(json.dumps(settings), encoding="utf-8")
    env = {
        "NW_HOST_ROOT": "/host",
        "NW_HOST_CONNECTION": "chroot",
        "NW_CR": "it",
        "NW_PACKAGE": "sysctl-tuning",
        "NW_VERSION": "1.3.0",
        "NW_NODE": "node-a",
        "NW_RESOURCE_ID": "it-1",
        "NW_TERMINATION_LOG": "/nwb-out/termination-log",
    }
    args = ["run", "--rm", "--network", "none"]
    args += ["-v", f"{root}:/host", "-v", f"{tmp_path / 'out'}:/nwb-out"]
    args += ["-v", f"{tmp_path / 'vars'}:/etc/nodewright/vars:ro"]
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    done = engine.run([*args, built.image, "run", "--stages", "apply,apply-check"], check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Set kernel parameters" in done.stdout
    dropin = root / "etc" / "sysctl.d" / "90-node-tuning.conf"
    assert dropin.read_text(encoding="utf-8").strip() == "vm.swappiness=7"
    assert not (base_rootfs / "etc" / "sysctl.d" / "90-node-tuning.conf").exists()
    result = json.loads((tmp_path / "out" / "termination-log").read_text(encoding="utf-8"))
    assert [s["name"] for s in result["stages"]] == ["apply", "apply-check"]
    assert all(s["status"] == "ok" for s in result["stages"])
    assert result["stages"][0]["changed"] >= 1


def test_a_role_without_a_manifest_is_bad_input(tmp_path: Path) -> None:
    role = tmp_path / "sysctl-tuning"
    shutil.copytree(EXAMPLE_ROLE, role)
    (role / "nodewright-package.yaml").unlink(missing_ok=True)
    result = CliRunner().invoke(main, ["package", "build", str(role)])
    assert result.exit_code == 2
    assert "nwb package init" in result.stderr
