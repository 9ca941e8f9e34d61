"""Fixtures of the e2e suite; the machinery lives in ``e2e_harness`` (see its docstring)."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator

import pytest
import yaml
from e2e_harness import (
    CRDS,
    E2E,
    NAMESPACE,
    DispatchRunner,
    World,
    _package_dirs,
    wait_for,
)
from invariants import Invariants
from kubernetes import client, config

from nodewright_bridge.sandbox import Sandbox, binaries


@pytest.fixture(scope="session")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    if os.geteuid() != 0:
        pytest.skip("exec-mode nodes need root (namespaces, chroot, mounts)")
    missing = [n for n, b in binaries.find_all(binaries.REQUIRED).items() if b is None]
    if missing:
        pytest.skip(f"control-plane binaries missing ({', '.join(missing)}); run `make setup`")
    packages = _package_dirs(tmp_path_factory.mktemp("packages"))
    runner = DispatchRunner(packages)
    box = Sandbox(
        tmp_path_factory.mktemp("e2e-sandbox"), nodes=0, runner=runner, heartbeat_seconds=30.0
    )
    box.start()
    api = config.new_client_from_config(config_file=str(box.kubeconfig))
    try:
        ext = client.ApiextensionsV1Api(api)
        for path in sorted(CRDS.glob("*.yaml")):
            ext.create_custom_resource_definition(yaml.safe_load(path.read_text()))
        for path in sorted(CRDS.glob("*.yaml")):
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            wait_for(
                lambda n=name: any(
                    c.type == "Established" and c.status == "True"
                    for c in (ext.read_custom_resource_definition(n).status.conditions or [])
                ),
                what=f"CRD {name} established",
            )
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        yield E2E(box, api, runner)
    finally:
        api.close()
        box.stop()


@pytest.fixture
def world(e2e: E2E) -> Iterator[World]:
    with World(e2e) as w:
        yield w


# Whether the test body failed: then the end-state check (leaked holds) is skipped, the body
# having stopped short of its intended end; what happened while it ran is still checked.
BODY_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[BODY_FAILED] = report.failed
    return report


@pytest.fixture(autouse=True)
def invariants(request: pytest.FixtureRequest) -> Iterator[Invariants | None]:
    """Every test with a ``world`` is checked against the invariants (see ``invariants.py``)."""
    if "world" not in request.fixturenames:
        yield None
        return
    world: World = request.getfixturevalue("world")
    yield world.invariants
    try:
        world.invariants.verify(end_state=not request.node.stash.get(BODY_FAILED, False))
    finally:
        world.invariants.stop()
