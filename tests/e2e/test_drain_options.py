"""The drain options against the sandbox's real Eviction API, PDBs and DaemonSet controller:
``disableEviction`` deletes a pod a PodDisruptionBudget protects, ``gracePeriod`` reaches the
API server with the eviction or the delete, and ``ignoreDaemonSets: false`` makes a DaemonSet pod
block the drain (named in ``PDBBlocked``) until the option is set back."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from e2e_harness import SIM_REGISTRY, World, wait_for
from kubernetes import client, watch

pytestmark = pytest.mark.e2e

NOOP = {"type": "noop"}


def package() -> dict[str, Any]:
    return {"tune": {"version": "1.0.0", "image": f"{SIM_REGISTRY}/tune", "interrupt": NOOP}}


def web(world: World, namespace: str, *, replicas: int = 1) -> None:
    labels = {"app": "web"}
    world.env.apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1DeploymentSpec(
                replicas=replicas,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(
                        node_selector=dict(world.labels),
                        containers=[client.V1Container(name="c", image="busybox")],
                    ),
                ),
            ),
        ),
    )


def running(world: World, namespace: str, selector: str) -> list[Any]:
    pods = world.core.list_namespaced_pod(namespace, label_selector=selector).items
    return [
        p for p in pods if p.metadata.deletion_timestamp is None and p.status.phase == "Running"
    ]


class DeletionGrace:
    """Records, per pod uid, the grace period of the first deletion the API server recorded
    (the simulated kubelet then removes the pod at once, so only a watch sees it)."""

    def __init__(self, world: World, namespace: str) -> None:
        self.seen: dict[str, int] = {}
        self._watch = watch.Watch()
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self.error: Exception | None = None
        self._thread = threading.Thread(
            target=self._run, args=(world, namespace), name="deletion-grace", daemon=True
        )
        self._thread.start()
        assert self._ready.wait(10), "pod watch did not start"

    def _run(self, world: World, namespace: str) -> None:
        listed = world.core.list_namespaced_pod(namespace)
        self._ready.set()
        version = listed.metadata.resource_version
        stream = self._watch.stream(
            world.core.list_namespaced_pod, namespace, resource_version=version, timeout_seconds=120
        )
        try:
            for event in stream:
                meta = event["object"].metadata
                if meta.deletion_timestamp is not None and meta.uid not in self.seen:
                    self.seen[meta.uid] = meta.deletion_grace_period_seconds
        except Exception as exc:  # the stream is cut when the test stops it
            if not self._stopped.is_set():
                self.error = exc

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()
        self._thread.join(10)
        assert self.error is None, f"pod watch failed: {self.error!r}"


def test_disable_eviction_deletes_a_pod_a_pdb_protects_with_the_grace_period(world: World) -> None:
    world.add_nodes(1)
    ns = world.namespace()
    web(world, ns)
    wait_for(lambda: len(running(world, ns, "app=web")) == 1, what="web pod running")
    (original,) = running(world, ns, "app=web")
    world.pdb(ns, "web-pdb", min_available=1, labels={"app": "web"})
    # The point of the option: the budget is not asked, so the only replica goes.
    world.invariants.allow_pdb_breach(f"{ns}/web-pdb", "disableEviction deletes without a PDB")
    grace = DeletionGrace(world, ns)
    cr = world.cr_name("delete")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "drain": {"disableEviction": True, "gracePeriod": 3, "timeout": "2m"},
            "packages": package(),
        },
    )
    world.start_controller()
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete")
    grace.stop()
    assert grace.seen.get(original.metadata.uid) == 3, grace.seen
    uids = {p.metadata.uid for p in world.core.list_namespaced_pod(ns).items}
    assert original.metadata.uid not in uids


def test_an_eviction_asks_for_the_grace_period(world: World) -> None:
    world.add_nodes(1)
    ns = world.namespace()
    web(world, ns)
    wait_for(lambda: len(running(world, ns, "app=web")) == 1, what="web pod running")
    (original,) = running(world, ns, "app=web")
    grace = DeletionGrace(world, ns)
    cr = world.cr_name("evict")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "drain": {"gracePeriod": 4},
            "packages": package(),
        },
    )
    world.start_controller()
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete")
    grace.stop()
    assert grace.seen.get(original.metadata.uid) == 4, grace.seen


def daemon_set(world: World, namespace: str) -> None:
    labels = {"app": "agent"}
    world.env.apps.create_namespaced_daemon_set(
        namespace,
        client.V1DaemonSet(
            metadata=client.V1ObjectMeta(name="agent"),
            spec=client.V1DaemonSetSpec(
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(
                        node_selector=dict(world.labels),
                        containers=[client.V1Container(name="c", image="busybox")],
                    ),
                ),
            ),
        ),
    )


def test_a_daemonset_pod_blocks_the_drain_unless_daemonsets_are_ignored(world: World) -> None:
    (node,) = world.add_nodes(1)
    ns = world.namespace()
    daemon_set(world, ns)
    wait_for(lambda: len(running(world, ns, "app=agent")) == 1, what="DaemonSet pod running")
    (agent,) = running(world, ns, "app=agent")
    cr = world.cr_name("strict")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "drain": {"ignoreDaemonSets": False, "timeout": "5s"},
            "packages": package(),
        },
    )
    world.start_controller()
    wait_for(lambda: world.node_status(cr, node) == "erroring", what="node erroring")
    entry = world.state(cr, node)["tune|1.0.0"]
    assert entry["cause"] == "drain", entry
    assert "not evictable with these drain options" in entry["message"], entry
    blocked = world.await_condition(cr, "PDBBlocked", lambda c: c["status"] == "True")
    assert f"{ns}/{agent.metadata.name}" in blocked["message"], blocked
    assert "ignoreDaemonSets" in blocked["message"], blocked
    # Setting the option back clears the cause: the node comes back and the pod stays.
    world.patch_cr(cr, {"spec": {"drain": {"ignoreDaemonSets": True}}})
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete")
    assert [p.metadata.uid for p in running(world, ns, "app=agent")] == [agent.metadata.uid]
