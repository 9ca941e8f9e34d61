"""``nwb plan --live``: the offline planner fed from a cluster instead of files.

What comes from the cluster: the NodeWright (``--name``, or the ``-f`` file's CR when one of that
name exists, for its batch state), its DeploymentPolicy (unless ``-p`` is given), every Node
(labels, taints, creation time, this CR's status / state / batch annotations), the pods bound to
nodes and every PodDisruptionBudget.

The cluster is decoded by the controller's own observe step (``controller.observing``) and every
node probed by the same stage planner call (``controller.planning.probe_views``): recorded
package states, this CR's pods in flight, drains, PDBs and sequencing against the other
NodeWrights (priority) give the same views the controller's next pass would see, and nodes
already converged are not candidates. The drain rules name the PDBs that allow no disruption
right now and cover a pod the drain would evict: those nodes are picked last, and the output
lists which PDB would block which node.

Requests: GET CR, GET policy, LIST nodes, LIST NodeWrights, LIST pods on nodes and in the
controller namespace, LIST PDBs (paged by 500).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from lifecycle import preflight, simulation, validation
from lifecycle.errors import SpecError
from lifecycle.nodestate import state_annotation
from lifecycle.rollout import NodeView
from lifecycle.spec import DeploymentPolicy, NodeWright
from lifecycle.status import BatchState, NodeWrightStatus, Status
from nodewright_bridge.commands import common
from nodewright_bridge.controller import observing, planning, podspec, snapshot
from nodewright_bridge.controller.settled import SettledNodes
from nodewright_bridge.errors import ApiError, NotFoundError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.rest import Rest

JsonObject = dict[str, Any]
# Pods a drain could have to evict: bound to a node and not finished (the controller's filter).
POD_FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


class LiveInputError(Exception):
    """Bad input found against the cluster: one ``path: message`` line each (exit 2)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True, slots=True)
class LiveNode:
    """What the cluster says about one targeted node, beyond the planner's NodeView."""

    name: str
    status: str
    pending: bool
    reason: str
    blocking_pdbs: tuple[str, ...] = ()
    note: str = ""
    check: str = ""  # check mode (preflight): compliant, changing, unknown, or waiting for it


@dataclass
class LiveInputs:
    cr: NodeWright
    policy: DeploymentPolicy | None
    nodes: list[NodeView]
    details: dict[str, LiveNode] = field(default_factory=dict)
    pdb_budgets: dict[str, int] = field(default_factory=dict)  # PDB key -> disruptionsAllowed
    batch_states: dict[str, BatchState] = field(default_factory=dict)
    cr_source: str = ""


def _load_cluster_cr(obj: Mapping[str, Any], name: str) -> NodeWright:
    try:
        return validation.load_nodewright(obj)
    except SpecError as exc:
        raise LiveInputError([f"NodeWright {name}: {p}" for p in exc.problems]) from None


def _status_of(obj: Mapping[str, Any] | None) -> NodeWrightStatus:
    if obj is None:
        return NodeWrightStatus()
    try:
        return NodeWrightStatus.model_validate(obj.get("status") or {})
    except ValidationError:
        return NodeWrightStatus()


def _get_optional(rest: Rest, resource: resources.Resource, name: str) -> JsonObject | None:
    try:
        return rest.get(resource, name)
    except NotFoundError:
        return None


def read_inputs(
    rest: Rest,
    *,
    file_cr: NodeWright | None,
    name: str | None,
    file_policy: DeploymentPolicy | None,
    now: datetime,
) -> LiveInputs:
    """Everything ``plan --live`` needs, read once from the cluster and decoded as the
    controller decodes it (``observing.observe``, the probe of ``planning.probe_views``)."""
    cr_name = file_cr.metadata.name if file_cr is not None else str(name)
    cluster_obj = _get_optional(rest, resources.NODEWRIGHTS, cr_name)
    if file_cr is not None:
        cr, source = file_cr, "file"
    elif cluster_obj is None:
        raise LiveInputError([f"--name: NodeWright {cr_name!r} not found in the cluster"])
    else:
        cr, source = _load_cluster_cr(cluster_obj, cr_name), "cluster"
    policy = file_policy or _cluster_policy(rest, cr)

    nodes = common.list_all(rest, resources.NODES)
    targeted = observing.targeted(cr, nodes)
    if not targeted:
        raise LiveInputError(
            [f"spec.nodeSelectors: no node in the cluster is targeted by NodeWright {cr_name!r}"]
        )
    others = [o for o in common.list_all(rest, resources.NODEWRIGHTS) if _name(o) != cr_name]
    stores = snapshot.stores_from(
        nodes=nodes,
        pods=[
            *common.list_all(rest, resources.PODS, field_selector=POD_FIELD_SELECTOR),
            *common.list_all(rest, resources.PODS, namespace=podspec.NAMESPACE),
        ],
        pdbs=common.list_all(rest, resources.PDBS),
        nodewrights=others,
    )
    crs = [c for o in others if isinstance(c := snapshot.parse_nodewright(o), NodeWright)]
    old = _status_of(cluster_obj)
    settled = SettledNodes()
    cached = observing.Caches(stores, settled, stale=lambda node: False)
    seen = observing.observe(cr, old, now, crs=[*crs, cr], policy=policy, cached=cached)
    probes, views = planning.probe_views(seen, planning.NodePlanner(stores, settled), {})
    inputs = LiveInputs(
        cr=cr,
        policy=policy,
        nodes=views,
        pdb_budgets={
            pdb.key: pdb.disruptions_allowed
            for found in snapshot.PdbIndex.of(stores.pdbs.values()).by_namespace.values()
            for pdb in found
        },
        batch_states={c: s.batch_state for c, s in old.compartments.items() if s.batch_state},
        cr_source=source,
    )
    versions = {n: p.version for n, p in cr.spec.packages.items()}
    for node, snap in seen.snaps.items():
        probe = probes[node][1]
        check = preflight.node_check(versions, snap.state, probe.preflight)
        inputs.details[node] = LiveNode(
            name=node,
            status=str(probe.status),
            pending=probe.status is not Status.COMPLETE,
            reason=probe.reason,
            blocking_pdbs=snap.blocking_pdbs,
            check="to check" if probe.check_pending else check,
        )
    for node, snap in seen.malformed.items():
        # The controller leaves such a node untouched until the annotation is fixed.
        inputs.details[node] = LiveNode(
            name=node,
            status=str(snap.status or Status.UNKNOWN),
            pending=False,
            reason="state annotation does not parse",
            blocking_pdbs=snap.blocking_pdbs,
            note=f"{state_annotation(cr_name)}: {snap.state_error}",
        )
    return inputs


def _name(obj: Mapping[str, Any]) -> str:
    return str(snapshot.meta_of(obj).get("name", ""))


def _cluster_policy(rest: Rest, cr: NodeWright) -> DeploymentPolicy | None:
    wanted = cr.spec.deployment_policy
    if not wanted:
        return None
    raw = _get_optional(rest, resources.DEPLOYMENT_POLICIES, wanted)
    if raw is None:
        raise LiveInputError(
            [
                f"spec.deploymentPolicy: DeploymentPolicy {wanted!r} not found in the "
                "cluster; create it or pass it with -p"
            ]
        )
    try:
        return validation.load_policy(raw)
    except SpecError as exc:
        raise LiveInputError([f"DeploymentPolicy {wanted}: {p}" for p in exc.problems]) from None


def plan(
    rest: Rest,
    *,
    file_cr: NodeWright | None,
    name: str | None,
    file_policy: DeploymentPolicy | None,
    fail: Sequence[str],
    now: datetime,
) -> tuple[LiveInputs, simulation.Simulation]:
    """Read the cluster and simulate the rollout from where it stands."""
    try:
        inputs = read_inputs(rest, file_cr=file_cr, name=name, file_policy=file_policy, now=now)
    except ApiError as exc:
        raise LiveInputError([f"cluster: {exc}"]) from None
    unknown = [n for n in fail if n not in inputs.details]
    if unknown:
        raise LiveInputError(
            [f"--fail: node {n!r} is not a node this NodeWright targets" for n in unknown]
        )
    sim = simulation.simulate(
        inputs.cr,
        inputs.policy,
        inputs.nodes,
        start=now,
        fail=frozenset(fail),
        batch_states=inputs.batch_states or None,
    )
    return inputs, sim


def to_json(inputs: LiveInputs, sim: simulation.Simulation) -> dict[str, object]:
    """The offline JSON shape plus what only a cluster can tell."""
    data = sim.to_json()
    data["nodes"] = {
        name: {
            "status": d.status,
            "pendingWork": d.pending,
            "reason": d.reason,
            "blockingPdbs": list(d.blocking_pdbs),
            **({"note": d.note} if d.note else {}),
            **({"check": d.check} if d.check else {}),
        }
        for name, d in sorted(inputs.details.items())
    }
    blocks: dict[str, list[str]] = {}
    for name, d in sorted(inputs.details.items()):
        for pdb in d.blocking_pdbs:
            blocks.setdefault(pdb, []).append(name)
    data["pdbBlocks"] = blocks
    data["source"] = {"cr": inputs.cr_source, "nodes": "cluster"}
    return data


def render_extra(inputs: LiveInputs, console: Console) -> None:
    """After the offline tables: the nodes' current state and the PDBs that would block."""
    table = Table(title="nodes now (from the cluster)", title_justify="left")
    checked = any(d.check for d in inputs.details.values())
    columns = ("node", "status", "work left", *(("check mode",) if checked else ()))
    for column in (*columns, "blocking PDBs", "why"):
        table.add_column(column, overflow="fold")
    for name, d in sorted(inputs.details.items()):
        table.add_row(
            name,
            d.status,
            "yes" if d.pending else "no",
            *((d.check or "-",) if checked else ()),
            ", ".join(d.blocking_pdbs) or "-",
            d.note or d.reason,
        )
    if checked:
        console.print(
            "nodes marked 'to check' run check mode first: a compliant one takes no batch slot",
            highlight=False,
        )
    console.print(table)
    blocks: dict[str, list[str]] = {}
    for name, d in sorted(inputs.details.items()):
        for pdb in d.blocking_pdbs:
            blocks.setdefault(pdb, []).append(name)
    for pdb, names in sorted(blocks.items()):
        console.print(
            f"[yellow]PodDisruptionBudget {pdb}[/yellow] allows "
            f"{inputs.pdb_budgets.get(pdb, 0)} disruption(s) now and would block the drain of: "
            f"{', '.join(names)} (picked last)",
            highlight=False,
        )
    done = [n for n, d in inputs.details.items() if not d.pending]
    if done:
        console.print(f"already converged (no work): {', '.join(sorted(done))}", highlight=False)
