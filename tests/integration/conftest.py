"""Shared fixtures for tests against the sandbox control plane.

- ``sandbox`` (session): etcd + kube-apiserver + kube-controller-manager + kube-scheduler on
  loopback and a simulated kubelet serving ``SANDBOX_NODES`` simulate-mode nodes. Started once per
  test session; every test isolates itself by namespace.
- ``control_plane`` (session): ``sandbox.control_plane``, for tests that only need the apiserver.
- ``kube`` (per test): a ``Kube`` with ready-made API objects and helpers whose objects are
  cleaned up after the test: ``namespace()``, ``add_nodes()``, ``cordon()``.
- ``base_rootfs`` (session): the cached Debian base root filesystem (built on first use).
- ``node_root`` (per test): ``(root, state)`` of a fresh copy-on-write node root over the cached
  Debian base, prepared for isolation (boot ``boot-1``: its per-boot file systems mounted, and
  unmounted with the root afterwards; ``roletesting`` runs the real agent on it); no control
  plane needed.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from waiting import wait_for

from nodewright_bridge import crds, errors
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.resources import Resource
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.sandbox import Sandbox, binaries, isolation, rootfs
from nodewright_bridge.sandbox.controlplane import ControlPlane
from nodewright_bridge.sandbox.kubelet.nodes import SimNode

SANDBOX_NODES = 4
SANDBOX_POOL_LABEL = "sandbox.nodewright.io/pool"


@pytest.fixture(scope="session")
def base_rootfs() -> Path:
    return rootfs.ensure_base_rootfs()


@pytest.fixture
def node_root(base_rootfs: Path, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    root = rootfs.mount_node_root(base_rootfs, tmp_path / "node")
    state = tmp_path / "node" / "isolation"
    isolation.prepare_node(root.path, state, "boot-1")
    yield root.path, state
    isolation.release_node(root.path, state)
    rootfs.unmount_node_root(root, remove=True)


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    found = binaries.find_all(binaries.REQUIRED)
    missing = [name for name, binary in found.items() if binary is None]
    if missing:
        pytest.skip(f"control-plane binaries missing ({', '.join(missing)}); run `make setup`")
    box = Sandbox(
        tmp_path_factory.mktemp("sandbox"),
        nodes=SANDBOX_NODES,
        labels={SANDBOX_POOL_LABEL: "default"},
    )
    box.start()
    STARTED.append(box)
    try:
        yield box
    finally:
        STARTED.remove(box)
        box.stop()


STARTED: list[Sandbox] = []  # the session sandbox, once a test has started it


@pytest.fixture(scope="module", autouse=True)
def no_nodewright_left() -> Iterator[None]:
    """Fail the module that leaves a NodeWright in the shared sandbox, and delete it.

    With no controller running, a left CR stays: one with no nodeSelectors targets every node
    and sequences the rollouts of the modules after it (``nwb plan --live`` then plans nothing),
    so a module's result would depend on which modules ran before it on the same worker.
    """
    yield
    if not STARTED:
        return
    api = config.new_client_from_config(config_file=str(STARTED[0].kubeconfig))
    try:
        left = delete_nodewrights(client.CustomObjectsApi(api))
    finally:
        api.close()
    if left:
        pytest.fail(
            f"this module left NodeWright(s) {', '.join(sorted(left))} in the shared sandbox; "
            "delete what a test creates (kube.defer)",
            pytrace=False,
        )


def delete_nodewrights(custom: client.CustomObjectsApi) -> list[str]:
    """Delete every NodeWright, finalizers removed first (no controller is there to remove
    them); returns the names found."""
    group, version, plural = crds.GROUP, crds.VERSION, "nodewrights"
    try:
        items = custom.list_cluster_custom_object(group, version, plural)["items"]
    except ApiException as exc:
        if exc.status == 404:  # the CRDs are not installed (or were removed): nothing is left
            return []
        raise
    for item in items:
        name = item["metadata"]["name"]
        with contextlib.suppress(ApiException):
            if item["metadata"].get("finalizers"):
                custom.patch_cluster_custom_object(
                    group, version, plural, name, {"metadata": {"finalizers": None}}
                )
            custom.delete_cluster_custom_object(group, version, plural, name)
    return [item["metadata"]["name"] for item in items]


@pytest.fixture(scope="session")
def control_plane(sandbox: Sandbox) -> ControlPlane:
    assert sandbox.control_plane is not None
    return sandbox.control_plane


@pytest.fixture(scope="session")
def kube_client(sandbox: Sandbox) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(sandbox.kubeconfig))
    try:
        yield api
    finally:
        api.close()


class Kube:
    """API objects for one test plus helpers that undo what they create."""

    def __init__(self, api: client.ApiClient, sandbox: Sandbox) -> None:
        self.api = api
        self.sandbox = sandbox
        self.kubeconfig: Path = sandbox.kubeconfig
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.ext = client.ApiextensionsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._namespaces: list[str] = []
        self._nodes: list[str] = []
        self._cordoned: list[str] = []
        self._cleanups: list[Callable[[], None]] = []

    def namespace(self, prefix: str = "t") -> str:
        """A fresh namespace whose ``default`` ServiceAccount exists (pods can be created)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        self._namespaces.append(name)

        def has_default_account() -> bool:
            try:
                self.core.read_namespaced_service_account("default", name)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
            return True

        wait_for(has_default_account, what=f"ServiceAccount {name}/default")
        return name

    def add_nodes(self, count: int = 1, *, labels: dict[str, str] | None = None) -> list[SimNode]:
        """Extra simulated nodes for this test only (removed afterwards)."""
        assert self.sandbox.kubelet is not None
        prefix = f"t-{uuid.uuid4().hex[:6]}-"
        nodes = self.sandbox.kubelet.add_nodes(
            [f"{prefix}{i}" for i in range(count)], labels=labels or {SANDBOX_POOL_LABEL: "test"}
        )
        self._nodes += [node.name for node in nodes]
        return nodes

    def cordon(self, node: str) -> None:
        self.core.patch_node(node, {"spec": {"unschedulable": True}})
        self._cordoned.append(node)

    def defer(self, cleanup: Callable[[], None]) -> None:
        self._cleanups.append(cleanup)

    def cleanup(self) -> None:
        for cleanup in reversed(self._cleanups):
            with contextlib.suppress(Exception):
                cleanup()
        for node in self._cordoned:
            with contextlib.suppress(ApiException):
                self.core.patch_node(node, {"spec": {"unschedulable": False}})
        for name in self._namespaces:
            with contextlib.suppress(ApiException):
                self.core.delete_namespace(name)
        if self._nodes and self.sandbox.kubelet is not None:
            with contextlib.suppress(Exception):
                self.sandbox.kubelet.remove_nodes(self._nodes)


@pytest.fixture
def kube(kube_client: client.ApiClient, sandbox: Sandbox) -> Iterator[Kube]:
    helper = Kube(kube_client, sandbox)
    try:
        yield helper
    finally:
        helper.cleanup()


CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)


def install_product_crds(rest: Rest) -> None:
    """The NodeWright and DeploymentPolicy CRDs, which the controller's informers watch."""
    for crd in crds.all_crds():
        with contextlib.suppress(errors.AlreadyExistsError):
            rest.create(CRDS, crd)

    def served() -> bool:
        try:
            rest.list(resources.NODEWRIGHTS)
            rest.list(resources.DEPLOYMENT_POLICIES)
        except errors.NotFoundError:
            return False
        return True

    wait_for(served, what="product CRDs served")
