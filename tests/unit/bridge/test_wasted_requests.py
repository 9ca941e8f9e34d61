"""Requests a rollout does not need are not sent: a pod delete the API already answered is not
sent again while the pod cache lags it, and a vars ConfigMap known to exist is not created again
by the pod starts of later batches (each would only be answered 404 or 409)."""

from __future__ import annotations

from typing import Any

from controller_world import NAMESPACE, ControllerWorld, node, nodewright

from nodewright_bridge.controller import podspec, snapshot
from nodewright_bridge.controller.pod_deletes import SENT_MEMORY_SECONDS, PodDeletes
from nodewright_bridge.k8s import resources, slimming, store
from nodewright_bridge.k8s.foreground import Foreground
from nodewright_bridge.k8s.patching import Writer

POOL = {"pool": "gpu"}
SPEC = {
    "nodeSelectors": {"matchLabels": POOL},
    "interruptionBudget": {"count": 1},
    "packages": {"tune": {"version": "1.0.0", "image": "registry.local:5000/tune"}},
}
DELETES_SENT_WITHIN = 10.0  # seconds the background senders get (they take milliseconds)


def world_with(nodes: int) -> ControllerWorld:
    world = ControllerWorld()
    for i in range(nodes):
        world.add(resources.NODES, node(f"n{i}", POOL))
    world.add(resources.NODEWRIGHTS, nodewright("tune", SPEC))
    return world


def pod_deletes(world: ControllerWorld) -> list[str]:
    prefix = f"/api/v1/namespaces/{NAMESPACE}/pods/"
    return [p for m, p in world.api.requests if m == "DELETE" and p.startswith(prefix)]


def configmap_posts(world: ControllerWorld) -> list[str]:
    return world.posts(f"/namespaces/{NAMESPACE}/configmaps")


def finish_first_batch(world: ControllerWorld) -> dict[str, Any]:
    """The first package pod ends and a pass records it and deletes it; returns the pod."""
    world.validate("tune")
    world.step("tune")
    world.step("tune")  # the validation pods' outcome recorded; their deletes sent
    assert world.reconciler.executor.wait_for_deletes(DELETES_SENT_WITHIN)
    (pod,) = world.pods("tune")
    world.finish_pods("tune")
    world.step("tune")
    assert world.reconciler.executor.wait_for_deletes(DELETES_SENT_WITHIN)
    return pod


def cache_still_shows(world: ControllerWorld, pod: dict[str, Any]) -> None:
    """The caches catch up with everything but the pod's delete (its watch event is late)."""
    world.sync()
    world.stores.package_pods.put(store.object_key(pod), slimming.slim_pod(dict(pod)))


def test_a_delete_already_answered_is_not_sent_again_while_the_cache_shows_the_pod() -> None:
    world = world_with(nodes=1)
    pod = finish_first_batch(world)
    name = pod["metadata"]["name"]
    assert [p for p in pod_deletes(world) if p.endswith("/" + name)], "the finished pod is deleted"
    sent = len(pod_deletes(world))
    for _ in range(3):
        cache_still_shows(world, pod)
        world.reconciler.reconcile("tune")
    assert world.reconciler.executor.wait_for_deletes(DELETES_SENT_WITHIN)
    assert len(pod_deletes(world)) == sent, "each extra delete would be answered 404"


def test_a_delete_is_sent_again_once_the_answer_is_old_and_the_pod_still_shows() -> None:
    world = world_with(nodes=1)
    pod = finish_first_batch(world)
    sent = len(pod_deletes(world))
    world.clock.advance(SENT_MEMORY_SECONDS + 1)
    cache_still_shows(world, pod)  # a cache this far behind may have missed a recreated pod
    world.reconciler.reconcile("tune")
    assert world.reconciler.executor.wait_for_deletes(DELETES_SENT_WITHIN)
    assert len(pod_deletes(world)) == sent + 1


def test_a_pod_created_again_under_a_deleted_name_is_deleted_again() -> None:
    world = ControllerWorld()
    deletes = PodDeletes(world.api, Writer(world.api), NAMESPACE, Foreground(), world.clock)
    deletes.soon("nw-pod")
    assert deletes.wait_idle(DELETES_SENT_WITHIN)
    deletes.soon("nw-pod")  # planned again from a cache that lags: not sent
    deletes.forget("nw-pod")  # what a pod start tells before it creates a pod of that name
    deletes.soon("nw-pod")
    assert deletes.wait_idle(DELETES_SENT_WITHIN)
    assert len(pod_deletes(world)) == 2


def test_the_vars_configmap_is_created_once_for_every_batch_of_a_rollout() -> None:
    world = world_with(nodes=3)
    world.validate("tune")
    for _ in range(3):  # three batches of one node each
        world.step("tune")
        world.finish_pods("tune")
        world.step("tune")
    complete = world.obj(resources.NODEWRIGHTS, "tune")["status"]["completeNodes"]
    assert complete == "3/3"
    assert len(configmap_posts(world)) == 1


def _vars_configmap(world: ControllerWorld, owner_uid: str) -> dict[str, Any]:
    cr = snapshot.parse_nodewright(world.obj(resources.NODEWRIGHTS, "tune"))
    assert not isinstance(cr, snapshot.InvalidCR)
    body = podspec.build_vars_configmap(cr, cr.spec.packages["tune"])
    body["metadata"]["namespace"] = NAMESPACE
    body["metadata"]["ownerReferences"][0]["uid"] = owner_uid
    return body


def test_a_restarted_controller_checks_the_configmap_it_finds_once() -> None:
    world = world_with(nodes=2)
    world.add(resources.CONFIG_MAPS, _vars_configmap(world, "uid-tune"))  # the last process's
    world.validate("tune")
    for _ in range(2):
        world.step("tune")
        world.finish_pods("tune")
        world.step("tune")
    assert len(configmap_posts(world)) == 1, "answered 409 once, then known"


def test_a_configmap_left_by_an_earlier_cr_of_that_name_is_not_taken_for_ours() -> None:
    world = world_with(nodes=2)
    world.add(resources.CONFIG_MAPS, _vars_configmap(world, "uid-of-a-deleted-cr"))
    world.validate("tune")
    for _ in range(2):
        world.step("tune")
        world.finish_pods("tune")
        world.step("tune")
    # the garbage collector deletes the old one: every pod start asks again until ours exists
    assert len(configmap_posts(world)) >= 3
