"""The executor on an in-memory API: it executes and decides nothing - a lost write race stops a
node's actions, a drain evicts what the snapshot planned, a refusal names the covering budget."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from controller_world import NAMESPACE, ControllerWorld, node, nodewright

from lifecycle import actions
from lifecycle.nodestate import PackageState, Stage, StageState
from lifecycle.spec import InterruptType, NodeWright
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.executor import CONFLICT_RETRY_SECONDS
from nodewright_bridge.controller.node_writes import NodeWork, Outcome
from nodewright_bridge.k8s import resources

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CR = nodewright(
    "tune",
    {"packages": {"tune": {"version": "1.0.0", "image": "registry.local:5000/tune"}}},
)


def setup() -> tuple[ControllerWorld, NodeWright]:
    world = ControllerWorld()
    world.add(resources.NODES, node("n0"))
    world.add(resources.NODEWRIGHTS, CR)
    world.sync()
    parsed = snapshot.parse_nodewright(world.stores.nodewrights.get("tune") or {})
    assert isinstance(parsed, NodeWright)
    return world, parsed


def snap_of(world: ControllerWorld, cr: NodeWright) -> snapshot.NodeSnapshot:
    raw = world.stores.nodes.get("n0")
    assert raw is not None
    pdbs = snapshot.PdbIndex.of(world.stores.pdbs.values())
    return snapshot.snapshot_node(cr, raw, world.stores, pdbs)


def apply(world: ControllerWorld, cr: NodeWright, work: NodeWork) -> Outcome:
    outcome = Outcome()
    with world.reconciler.executor.applying(cr, outcome) as writes:
        writes.add(work)
    return outcome


def start_actions() -> tuple[actions.Action, ...]:
    entry = PackageState(stage=Stage.APPLY, state=StageState.IN_PROGRESS, attempts=1)
    pod = actions.CreatePackagePod(
        node="n0",
        cr="tune",
        package="tune",
        version="1.0.0",
        stages=("apply", "apply-check"),
        resource_id="r1",
        node_order=0,
        attempt=1,
        config_hash="h",
        deadline=T0,
    )
    return (actions.PatchNodeState(node="n0", cr="tune", set={"tune|1.0.0": entry}), pod)


def test_a_lost_write_race_skips_the_rest_of_the_nodes_actions() -> None:
    world, cr = setup()
    snap = snap_of(world, cr)
    world.add(resources.NODES, node("n0", {"someone": "else"}))  # written after the snapshot
    outcome = apply(world, cr, NodeWork(node=snap, actions=start_actions()))
    assert outcome.conflicts == 1
    assert world.pods("tune") == [], "no pod without the node state that precedes it"


def test_the_node_state_is_written_before_the_pod_it_records() -> None:
    world, cr = setup()
    outcome = apply(world, cr, NodeWork(node=snap_of(world, cr), actions=start_actions()))
    assert outcome.conflicts == 0
    (pod,) = world.pods("tune")
    assert pod["spec"]["nodeName"] == "n0"
    methods = [m for m, p in world.api.requests if p.endswith("/nodes/n0") or p.endswith("/pods")]
    assert methods.index("PATCH") < methods.index("POST")


def test_a_drain_evicts_the_snapshots_pods_and_names_the_budget_that_refuses() -> None:
    world, cr = setup()
    for name in ("web-0", "db-0"):
        world.add(
            resources.PODS,
            {
                "metadata": {
                    "name": name,
                    "namespace": "apps",
                    "labels": {"app": name[:-2]},
                    "ownerReferences": [{"kind": "ReplicaSet", "controller": True, "name": "r"}],
                },
                "spec": {"nodeName": "n0"},
                "status": {"phase": "Running"},
            },
        )
    world.add(
        resources.PDBS,
        {
            "metadata": {"name": "db-pdb", "namespace": "apps"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 1},
            "status": {"disruptionsAllowed": 0},
        },
    )
    world.api.refuse_evictions[resources.PODS.path(namespace="apps", name="db-0")] = "db-pdb"
    world.sync()
    snap = snap_of(world, cr)
    assert [e.budgets for e in snap.evictions] == [("apps/db-pdb",), ()]
    drain = actions.Drain(node="n0", cr="tune", deadline=T0, options=cr.spec.drain)
    outcome = apply(world, cr, NodeWork(node=snap, actions=(drain,)))
    assert outcome.evicted == 1
    assert outcome.pdb_blocked == {"n0": ["apps/db-pdb"]}
    remaining = [p for p in world.api.objects if p.startswith("/api/v1/namespaces/apps/pods/")]
    assert remaining == ["/api/v1/namespaces/apps/pods/db-0"]
    assert NAMESPACE not in remaining[0]


def node_patches(world: ControllerWorld) -> int:
    return sum(1 for m, p in world.api.requests if m == "PATCH" and "/nodes/" in p)


def test_the_outcome_counts_the_node_patches_sent_lost_races_included() -> None:
    world, cr = setup()
    snap = snap_of(world, cr)
    before = node_patches(world)
    started = apply(world, cr, NodeWork(node=snap, actions=start_actions()))
    assert started.node_patches == node_patches(world) - before == 1

    world.add(resources.NODES, node("n0", {"someone": "else"}))  # written after the snapshot
    before = node_patches(world)
    lost = apply(world, cr, NodeWork(node=snap, actions=start_actions()))
    assert lost.conflicts == 1
    assert lost.node_patches == node_patches(world) - before == 1


def test_work_that_only_deletes_a_pod_sends_no_node_patch() -> None:
    world, cr = setup()
    before = node_patches(world)
    delete = actions.DeletePod(name="tune-n0-gone", node="n0", reason="finished")
    outcome = apply(world, cr, NodeWork(node=snap_of(world, cr), actions=(delete,)))
    assert outcome.node_patches == 0
    assert node_patches(world) == before


def interrupt_actions() -> tuple[actions.Action, ...]:
    """The apply's start, turned into the interrupt's: the entry at the interrupt, its pod."""
    record, started = start_actions()
    assert isinstance(record, actions.PatchNodeState) and isinstance(
        started, actions.CreatePackagePod
    )
    entry = record.set["tune|1.0.0"].model_copy(update={"stage": Stage.INTERRUPT})
    pod = actions.CreateInterruptPod(
        **{f: getattr(started, f) for f in ("node", "cr", "package", "version", "resource_id")},
        stage=Stage.INTERRUPT,
        interrupt_type=InterruptType.REBOOT,
        services=(),
        members=("tune",),
        node_order=0,
        attempt=1,
        deadline=T0,
    )
    return (replace(record, set={"tune|1.0.0": entry}), pod)


def interrupt_pods(world: ControllerWorld) -> list[str]:
    return [
        p["metadata"]["name"] for p in world.pods("tune") if "-interrupt-" in p["metadata"]["name"]
    ]


def test_no_interrupt_pod_while_the_api_lists_a_pod_the_cache_did_not_show_on_the_node() -> None:
    world, cr = setup()
    snap = snap_of(world, cr)  # the cache: nothing to drain
    late = {
        "metadata": {
            "name": "web-1",
            "namespace": "apps",
            "ownerReferences": [{"kind": "ReplicaSet", "controller": True, "name": "web"}],
        },
        "spec": {"nodeName": "n0"},
        "status": {"phase": "Pending"},
    }
    world.add(resources.PODS, late)  # bound after the drain by a scheduler with a stale cache
    world.add(
        resources.PODS,
        {**late, "metadata": {**late["metadata"], "name": "elsewhere"}, "spec": {"nodeName": "n1"}},
    )
    outcome = apply(world, cr, NodeWork(node=snap, actions=interrupt_actions()))
    assert interrupt_pods(world) == []
    assert outcome.requeue_after == CONFLICT_RETRY_SECONDS
    state = world.obj(resources.NODES, "n0")["metadata"]["annotations"]
    assert "bridge.nodewright.io/state-tune" in state, "the interrupt stays recorded"
    notes = [e for p, e in world.api.stored() if "/events/" in p]
    assert any(
        e.get("reason") == "InterruptHeld" and "apps/web-1" in e.get("note", "") for e in notes
    )
    assert not any("elsewhere" in e.get("note", "") for e in notes)


def test_the_interrupt_pod_is_created_once_the_api_lists_nothing_to_drain() -> None:
    world, cr = setup()
    finished = {
        "metadata": {"name": "job-1", "namespace": "apps"},
        "spec": {"nodeName": "n0"},
        "status": {"phase": "Succeeded"},
    }
    world.add(resources.PODS, finished)
    outcome = apply(world, cr, NodeWork(node=snap_of(world, cr), actions=interrupt_actions()))
    assert outcome.requeue_after is None
    assert len(interrupt_pods(world)) == 1
