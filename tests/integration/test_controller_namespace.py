"""``nwb controller`` and its namespace: missing, it exits at once with one line saying what to do
(it used to warn about the leader lease every 2 s forever); with ``--create-namespace`` it creates
it and leads."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from conftest import Kube, install_product_crds
from kubernetes.client.exceptions import ApiException
from waiting import wait_for

from nodewright_bridge import errors
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.client import ClientSettings
from nodewright_bridge.k8s.rest import Rest


@pytest.fixture
def rest(kube: Kube) -> Iterator[Rest]:
    rest = Rest.connect(ClientSettings(kubeconfig=str(kube.kubeconfig)), metrics=None)
    try:
        yield rest
    finally:
        rest.close()


def controller(kube: Kube, namespace: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from nodewright_bridge.cli import main; main()",
        "controller",
        "--kubeconfig",
        str(kube.kubeconfig),
        "--namespace",
        namespace,
        "--metrics-addr",
        "127.0.0.1:0",
        *extra,
    ]


def test_a_missing_namespace_is_one_line_and_exit_code_2(kube: Kube) -> None:
    namespace = f"absent-{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        controller(kube, namespace), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert f"namespace {namespace} does not exist" in lines[0]
    assert "--create-namespace" in lines[0]


def test_create_namespace_creates_it_and_the_controller_leads(kube: Kube, rest: Rest) -> None:
    install_product_crds(rest)
    namespace = f"made-{uuid.uuid4().hex[:6]}"
    proc = subprocess.Popen(
        controller(kube, namespace, "--create-namespace"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def holder() -> str:
        try:
            lease = rest.get(resources.LEASES, "nodewright-bridge-controller", namespace=namespace)
        except errors.NotFoundError:
            return ""
        return str(lease["spec"].get("holderIdentity") or "")

    try:
        wait_for(holder, what=f"the lease in the created namespace {namespace}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(ApiException):
            kube.core.delete_namespace(namespace)
