"""``nwb plan --live``: the offline planner fed from a cluster instead of files.

What comes from the cluster: the NodeWright (``--name``, or the ``-f`` file's CR when one of that
name exists, for its batch state), its DeploymentPolicy (unless ``-p`` is given), every Node
(labels, taints, creation time, this CR's status / state / batch annotations), the pods bound to
nodes and every PodDisruptionBudget.

Per node, the stage planner (``lifecycle.stages.plan_node``) decides from the node's recorded
package states whether there is work left for this CR (install, upgrade, config change,
uninstall), exactly as the controller would; nodes already converged are not candidates. The
drain rules (``lifecycle.draining.blocking_pdbs``) name the PDBs that allow no disruption right
now and cover a pod the drain would evict: those nodes are picked last by the planner, and the
output lists which PDB would block which node.

Caveat: sequencing against other NodeWrights (priority) is not applied - every node is treated as
ready for this CR.

Requests: GET CR, GET policy, LIST nodes, LIST pods on nodes, LIST PDBs (paged by 500).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from lifecycle import draining, selectors, simulation, stages, validation
from lifecycle.errors import SpecError
from lifecycle.nodestate import CORDON_ANNOTATION, batch_annotation, state_annotation, status_key
from lifecycle.rollout import NodeView
from lifecycle.spec import DeploymentPolicy, NodeWright
from lifecycle.status import BatchState, NodeWrightStatus, Status
from nodewright_bridge.commands import status as status_cmd
from nodewright_bridge.controller import snapshot
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


def _batch_states(obj: Mapping[str, Any] | None) -> dict[str, BatchState]:
    if obj is None:
        return {}
    try:
        status = NodeWrightStatus.model_validate(obj.get("status") or {})
    except ValidationError:
        return {}
    return {
        name: comp.batch_state
        for name, comp in status.compartments.items()
        if comp.batch_state is not None
    }


def _get_optional(rest: Rest, resource: resources.Resource, name: str) -> JsonObject | None:
    try:
        return rest.get(resource, name)
    except NotFoundError:
        return None


def node_view(
    cr: NodeWright,
    node: Mapping[str, Any],
    pods: Sequence[draining.PodView],
    pdbs: Sequence[draining.PdbView],
    now: datetime,
) -> tuple[NodeView, LiveNode]:
    """The planner's view of one targeted node and what ``--live`` reports about it."""
    meta = snapshot.meta_of(node)
    name = str(meta.get("name", ""))
    labels = dict(snapshot.labels_of(node))
    annotations = snapshot.annotations_of(node)
    cr_name = cr.metadata.name
    recorded = snapshot.parse_status(annotations.get(status_key(cr_name)))
    blocking = tuple(p.key for p in draining.blocking_pdbs(pods, pdbs, cr.spec.drain))
    try:
        state = snapshot.parse_state(annotations.get(state_annotation(cr_name)))
    except ValueError as exc:
        # The controller leaves such a node untouched until the annotation is fixed.
        detail = LiveNode(
            name=name,
            status=str(recorded or Status.UNKNOWN),
            pending=False,
            reason="state annotation does not parse",
            blocking_pdbs=blocking,
            note=f"{state_annotation(cr_name)}: {exc}",
        )
        view = NodeView(
            name=name,
            labels=labels,
            taints=snapshot.node_taints(node),
            created=snapshot.parse_time(meta.get("creationTimestamp")),
            status=recorded or Status.UNKNOWN,
            has_pending_work=False,
        )
        return view, detail
    facts = stages.NodeFacts(
        name=name,
        boot_id=snapshot.boot_id(node),
        ready=snapshot.node_ready(node),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        cordon=snapshot.parse_cordon(annotations.get(CORDON_ANNOTATION)),
    )
    planned = stages.plan_node(
        stages.NodeInput(
            cr=cr,
            node=facts,
            state=state,
            now=now,
            allowed_to_start=False,
            previous_status=recorded,
        )
    )
    pending = planned.status is not Status.COMPLETE
    status = recorded or (Status.COMPLETE if not pending else Status.WAITING)
    view = NodeView(
        name=name,
        labels=labels,
        taints=snapshot.node_taints(node),
        created=snapshot.parse_time(meta.get("creationTimestamp")),
        status=status,
        has_pending_work=pending,
        record=snapshot.parse_record(annotations.get(batch_annotation(cr_name))),
        pdb_exhausted=bool(blocking),
    )
    detail = LiveNode(
        name=name,
        status=str(status),
        pending=pending,
        reason=planned.reason,
        blocking_pdbs=blocking,
    )
    return view, detail


def read_inputs(
    rest: Rest,
    *,
    file_cr: NodeWright | None,
    name: str | None,
    file_policy: DeploymentPolicy | None,
    now: datetime,
) -> LiveInputs:
    """Everything ``plan --live`` needs, read once from the cluster."""
    cr_name = file_cr.metadata.name if file_cr is not None else str(name)
    cluster_obj = _get_optional(rest, resources.NODEWRIGHTS, cr_name)
    if file_cr is not None:
        cr, source = file_cr, "file"
    elif cluster_obj is None:
        raise LiveInputError([f"--name: NodeWright {cr_name!r} not found in the cluster"])
    else:
        cr, source = _load_cluster_cr(cluster_obj, cr_name), "cluster"

    policy = file_policy
    wanted = cr.spec.deployment_policy
    if policy is None and wanted:
        raw = _get_optional(rest, resources.DEPLOYMENT_POLICIES, wanted)
        if raw is None:
            raise LiveInputError(
                [
                    f"spec.deploymentPolicy: DeploymentPolicy {wanted!r} not found in the "
                    "cluster; create it or pass it with -p"
                ]
            )
        try:
            policy = validation.load_policy(raw)
        except SpecError as exc:
            raise LiveInputError(
                [f"DeploymentPolicy {wanted}: {p}" for p in exc.problems]
            ) from None

    nodes = status_cmd.list_all(rest, resources.NODES)
    targeted = [
        n for n in nodes if selectors.matches(cr.spec.node_selectors, snapshot.labels_of(n))
    ]
    pods_by_node: dict[str, list[draining.PodView]] = {}
    if targeted:
        for pod in status_cmd.list_all(rest, resources.PODS, field_selector=POD_FIELD_SELECTOR):
            node_name = str((pod.get("spec") or {}).get("nodeName") or "")
            pods_by_node.setdefault(node_name, []).append(snapshot.pod_view(pod))
    pdb_objects = status_cmd.list_all(rest, resources.PDBS) if targeted else []
    pdbs = snapshot.PdbIndex.of(pdb_objects)
    budgets = {
        view.key: view.disruptions_allowed for views in pdbs.by_namespace.values() for view in views
    }
    inputs = LiveInputs(
        cr=cr,
        policy=policy,
        nodes=[],
        pdb_budgets=budgets,
        batch_states=_batch_states(cluster_obj),
        cr_source=source,
    )
    for node in targeted:
        pods = pods_by_node.get(str(snapshot.meta_of(node).get("name", "")), [])
        view, detail = node_view(cr, node, pods, pdbs.relevant(pods), now)
        inputs.nodes.append(view)
        inputs.details[view.name] = detail
    if not inputs.nodes:
        raise LiveInputError(
            [f"spec.nodeSelectors: no node in the cluster is targeted by NodeWright {cr_name!r}"]
        )
    return inputs


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
    for column in ("node", "status", "work left", "blocking PDBs", "why"):
        table.add_column(column, overflow="fold")
    for name, d in sorted(inputs.details.items()):
        table.add_row(
            name,
            d.status,
            "yes" if d.pending else "no",
            ", ".join(d.blocking_pdbs) or "-",
            d.note or d.reason,
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
