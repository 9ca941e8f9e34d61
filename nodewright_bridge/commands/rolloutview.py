"""What ``nwb status`` shows: one rollout's progress, built from the raw CR and Node objects.

Why a separate, I/O-free module: the CLI (one-shot, ``--watch``, ``-o json``), the demo and the
unit tests all render the same view, and the view must never crash on what it reads - a node with
a malformed annotation is shown as such, a CR without status yet shows zeros.

Where the facts come from (docs/architecture.md, "Status and conditions"): the CR status holds
the bounded aggregates (status, conditions, per-compartment counters and batch state, recent
failures); per-node detail
comes from each Node's ``status-<cr>`` label/annotation, ``state-<cr>`` annotation (package,
stage, state, attempts, last failure message) and ``batch-<cr>`` annotation (compartment, batch).
Nodes the rollout has not picked yet are placed in a compartment with the policy's rules when the
policy is known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from lifecycle import compartments, pod_records, selectors
from lifecycle.compartments import DEFAULT_COMPARTMENT
from lifecycle.nodestate import (
    IGNORE_LABEL,
    PackageState,
    batch_annotation,
    drift_label,
    state_annotation,
    status_key,
)
from lifecycle.spec import DeploymentPolicy, LabelSelector, NodeWright
from lifecycle.stages import PodObservation
from lifecycle.status import Status
from nodewright_bridge.controller import snapshot

JsonObject = Mapping[str, Any]

# Conditions that end a watch (see RolloutView.outcome).
TERMINAL_OK = "ready"
TERMINAL_STALLED = "stalled"
TERMINAL_DEGRADED = "degraded"
# Node statuses in the order they are listed: what needs attention first.
_STATUS_ORDER = {
    "erroring": 0,
    "blocked": 1,
    "in_progress": 2,
    "paused": 3,
    "disabled": 3,
    "waiting": 4,
    "unknown": 5,
    "ignored": 6,
    "complete": 7,
}
_STATUS_STYLE = {
    "complete": "green",
    "in_progress": "cyan",
    "erroring": "red",
    "blocked": "yellow",
    "waiting": "dim",
    "paused": "magenta",
    "disabled": "magenta",
    "ignored": "dim",
}
# Entry states, most interesting first, when choosing a node's "current" package.
_STATE_RANK = {"erroring": 0, "in_progress": 1, "unknown": 2, "complete": 3, "skipped": 4}
MESSAGE_WIDTH = 120


@dataclass(frozen=True, slots=True)
class PackageRow:
    """One package entry of a node (the per-node summary lists every one)."""

    package: str
    version: str
    stage: str
    state: str


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node as ``nwb status`` lists it (``package``... : the entry worth showing)."""

    name: str
    status: str
    compartment: str = ""
    batch: int | None = None
    package: str = ""
    version: str = ""
    stage: str = ""
    state: str = ""
    attempts: int = 0
    message: str = ""
    updated: str = ""
    packages: tuple[PackageRow, ...] = ()  # every entry, in package order
    check: str = ""  # what check mode found for the shown entry (compliant, changes, ...)


@dataclass(frozen=True, slots=True)
class CompartmentRow:
    """One compartment: counters from the CR status, stop reason from the Stalled condition."""

    name: str
    strategy: str
    matched: int
    ceiling: int
    in_progress: int
    completed: int
    failed: int
    batch: int | None
    stopped: str = ""
    checks: str = ""  # check-mode counts, e.g. "3 compliant, 1 changing"


@dataclass(frozen=True, slots=True)
class ConditionRow:
    type: str
    status: str
    reason: str
    message: str
    fresh: bool  # observedGeneration matches metadata.generation (or is not reported)


@dataclass(frozen=True, slots=True)
class RolloutView:
    """Everything ``nwb status`` shows about one NodeWright."""

    name: str
    generation: int
    observed_generation: int | None
    status: str
    complete_nodes: str
    packages: str
    policy: str
    conditions: tuple[ConditionRow, ...]
    compartments: tuple[CompartmentRow, ...]
    nodes: tuple[NodeRow, ...]
    recent_failures: tuple[dict[str, str], ...] = ()
    problems: tuple[str, ...] = field(default=())
    checks: str = ""  # status.checks: check-mode outcomes over all nodes

    def condition(self, kind: str) -> ConditionRow | None:
        return next((c for c in self.conditions if c.type == kind), None)

    def _true(self, kind: str) -> bool:
        cond = self.condition(kind)
        return cond is not None and cond.fresh and cond.status == "True"

    @property
    def outcome(self) -> str | None:
        """Where a watch stops: ``ready``, ``stalled``, ``degraded`` (nothing moves) or None.

        Only conditions written for the current generation count, so a watch started right after
        an edit does not stop on the previous generation's Ready. Degraded alone does not end the
        watch while other nodes are still progressing; it does once nothing is in progress.
        """
        if self.observed_generation is not None and self.observed_generation < self.generation:
            return None
        if self._true("Ready"):
            return TERMINAL_OK
        if self._true("Stalled"):
            return TERMINAL_STALLED
        if self._true("Degraded") and not self._true("Progressing"):
            return TERMINAL_DEGRADED
        return None

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.nodes:
            out[row.status] = out.get(row.status, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        """The stable JSON shape of ``nwb status -o json``."""
        return {
            "name": self.name,
            "generation": self.generation,
            "observedGeneration": self.observed_generation,
            "status": self.status,
            "completeNodes": self.complete_nodes,
            "packages": self.packages,
            "policy": self.policy,
            "outcome": self.outcome,
            "conditions": [
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                for c in self.conditions
            ],
            "compartments": {
                c.name: {
                    "strategy": c.strategy,
                    "matched": c.matched,
                    "ceiling": c.ceiling,
                    "inProgress": c.in_progress,
                    "completed": c.completed,
                    "failed": c.failed,
                    "batch": c.batch,
                    "stopped": c.stopped,
                    "checks": c.checks,
                }
                for c in self.compartments
            },
            "nodes": {row.name: _node_json(row) for row in self.nodes},
            "nodeCounts": self.counts(),
            "recentFailures": list(self.recent_failures),
            "problems": list(self.problems),
            "checks": self.checks,
        }


def _node_json(row: NodeRow) -> dict[str, Any]:
    data = asdict(row)
    del data["name"]
    data["packages"] = list(data["packages"])
    return {_camel(k): v for k, v in data.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# ---- building the view ----------------------------------------------------------------------


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _int(value: object, default: int = 0) -> int:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return default


def parse_cr(obj: JsonObject) -> NodeWright | None:
    """The validated CR, or None when it does not validate (the view then uses raw fields)."""
    parsed = snapshot.parse_nodewright(obj)
    return parsed if isinstance(parsed, NodeWright) else None


def parse_policy(obj: JsonObject | None) -> DeploymentPolicy | None:
    return snapshot.parse_policy(obj) if obj is not None else None


def selector_string(selector: LabelSelector) -> str:
    """A LabelSelector as the API's ``labelSelector`` query (empty: every object)."""
    parts = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for req in selector.match_expressions:
        operator = str(req.operator)
        values = ",".join(sorted(req.values))
        if operator == "In":
            parts.append(f"{req.key} in ({values})")
        elif operator == "NotIn":
            parts.append(f"{req.key} notin ({values})")
        elif operator == "Exists":
            parts.append(req.key)
        else:
            parts.append(f"!{req.key}")
    return ",".join(parts)


def _current_entry(
    state: Mapping[str, PackageState], package_order: Sequence[str]
) -> tuple[str, PackageState] | None:
    """The entry worth showing: failing first, then running, then the latest change."""
    if not state:
        return None
    order = {name: i for i, name in enumerate(package_order)}
    best = min(_STATE_RANK.get(str(e.state), 5) for e in state.values())
    candidates = [(k, e) for k, e in state.items() if _STATE_RANK.get(str(e.state), 5) == best]

    def recency(item: tuple[str, PackageState]) -> tuple[str, int]:
        # Latest update wins (RFC 3339 strings sort by time); then the later package in the spec.
        key, entry = item
        return (entry.updated, order.get(key.partition("|")[0], -1))

    return max(candidates, key=recency)


def node_row(
    node: JsonObject,
    cr_name: str,
    *,
    targeted: bool,
    compartment: str = "",
    package_order: Sequence[str] = (),
    pods: Sequence[PodObservation] = (),
) -> NodeRow:
    """One Node's row for ``cr_name`` (never raises on malformed annotations); ``pods``: the
    CR's pods on the node, whose carried starts (``lifecycle.pod_records``) show it working."""
    meta = snapshot.meta_of(node)
    name = str(meta.get("name", ""))
    labels = _str_map(meta.get("labels"))
    annotations = _str_map(meta.get("annotations"))
    status = labels.get(status_key(cr_name)) or annotations.get(status_key(cr_name)) or ""
    if not status:
        status = "ignored" if labels.get(IGNORE_LABEL) == "true" else "waiting"
    if not targeted and status == "waiting":
        status = "unknown"
    batch: int | None = None
    record = snapshot.parse_record(annotations.get(batch_annotation(cr_name)))
    if record is not None:
        compartment, batch = record.compartment, record.batch
    try:
        state = snapshot.parse_state(annotations.get(state_annotation(cr_name)))
    except ValueError:
        return NodeRow(
            name=name,
            status=status,
            compartment=compartment,
            batch=batch,
            message=f"annotation {state_annotation(cr_name)} does not parse",
        )
    carried = pod_records.overlay(state, None, pods, snapshot.parse_status(status))
    if carried.keys:
        state, status = dict(carried.state), Status.IN_PROGRESS.value
    current = _current_entry(state, package_order)
    if current is None:
        return NodeRow(name=name, status=status, compartment=compartment, batch=batch)
    key, entry = current
    package, _, version = key.partition("|")
    order = {n: i for i, n in enumerate(package_order)}
    every = tuple(
        PackageRow(k.partition("|")[0], k.partition("|")[2], str(e.stage), str(e.state))
        for k, e in sorted(
            state.items(), key=lambda item: (order.get(item[0].partition("|")[0], -1), item[0])
        )
    )
    return NodeRow(
        name=name,
        status=status,
        compartment=compartment,
        batch=batch,
        package=package,
        version=version,
        stage=str(entry.stage),
        state=str(entry.state),
        attempts=entry.attempts,
        message=" ".join(entry.message.split())[: MESSAGE_WIDTH * 4],
        updated=entry.updated,
        packages=every,
        check="drifted" if labels.get(drift_label(cr_name)) == "true" else entry.preflight,
    )


def _stopped_reason(conditions: Sequence[ConditionRow], compartment: str) -> str:
    """Why ``compartment`` stopped, from the Stalled condition's ``; ``-separated message.

    Accepts both ``name: why`` parts and the planner's ``compartment <name> stopped ...`` lines.
    """
    stalled = next((c for c in conditions if c.type == "Stalled" and c.status == "True"), None)
    if stalled is None:
        return ""
    for raw in stalled.message.split("; "):
        part = raw.strip()
        if part.startswith(f"{compartment}: "):
            return part[len(compartment) + 2 :].strip()
        if f"compartment {compartment} " in f"{part} ":
            return part
    return ""


def build_view(
    cr_obj: JsonObject,
    nodes: Iterable[JsonObject],
    *,
    policy_obj: JsonObject | None = None,
    pods: Iterable[JsonObject] = (),
) -> RolloutView:
    """The view of one NodeWright from its raw object, the Nodes, (optionally) its policy and
    its package pods (a node whose pod carries its start shows in progress)."""
    on_node = snapshot.carrying_by_node(pods)
    meta = snapshot.meta_of(cr_obj)
    name = str(meta.get("name", ""))
    generation = _int(meta.get("generation"), 1)
    raw_status = cr_obj.get("status")
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
    observed = status.get("observedGeneration")
    cr = parse_cr(cr_obj)
    problems: list[str] = []
    if cr is None:
        problems.append("the NodeWright does not validate; see its InvalidSpec condition")
    policy = parse_policy(policy_obj)

    conditions: list[ConditionRow] = []
    for raw in status.get("conditions") or ():
        if not isinstance(raw, Mapping):
            continue
        cond_gen = raw.get("observedGeneration")
        conditions.append(
            ConditionRow(
                type=str(raw.get("type", "")),
                status=str(raw.get("status", "Unknown")),
                reason=str(raw.get("reason", "")),
                message=str(raw.get("message", "")),
                fresh=cond_gen is None or _int(cond_gen) >= generation,
            )
        )

    node_list = [n for n in nodes if isinstance(n, Mapping)]
    targeted: dict[str, bool] = {}
    for node in node_list:
        node_name = str(snapshot.meta_of(node).get("name", ""))
        labels = _str_map(snapshot.meta_of(node).get("labels"))
        annotations = _str_map(snapshot.meta_of(node).get("annotations"))
        is_target = cr is not None and selectors.matches(cr.spec.node_selectors, labels)
        ours = status_key(name) in labels or state_annotation(name) in annotations
        if is_target or ours:
            targeted[node_name] = is_target
    assignment: Mapping[str, str] = {}
    if cr is not None:
        rules = compartments.build(cr, policy)
        if rules is not None and (policy is not None or not cr.spec.deployment_policy):
            pairs = [
                (
                    str(snapshot.meta_of(n).get("name", "")),
                    _str_map(snapshot.meta_of(n).get("labels")),
                )
                for n in node_list
                if targeted.get(str(snapshot.meta_of(n).get("name", "")))
            ]
            assignment = compartments.assign(rules, pairs).of_node
    package_order = sorted(cr.spec.packages) if cr is not None else []
    rows = [
        node_row(
            node,
            name,
            targeted=targeted[str(snapshot.meta_of(node).get("name", ""))],
            compartment=assignment.get(str(snapshot.meta_of(node).get("name", "")), ""),
            package_order=package_order,
            pods=on_node.get(str(snapshot.meta_of(node).get("name", "")), ()),
        )
        for node in node_list
        if str(snapshot.meta_of(node).get("name", "")) in targeted
    ]
    rows.sort(key=lambda r: (_STATUS_ORDER.get(r.status, 5), r.compartment, r.name))

    comp_rows: list[CompartmentRow] = []
    raw_compartments = status.get("compartments")
    if isinstance(raw_compartments, Mapping):
        for comp_name, raw in raw_compartments.items():
            if not isinstance(raw, Mapping) or _empty_default(str(comp_name), raw):
                continue
            batch_state = raw.get("batchState")
            comp_rows.append(
                CompartmentRow(
                    name=str(comp_name),
                    strategy=str(raw.get("strategy") or ""),
                    matched=_int(raw.get("matched")),
                    ceiling=_int(raw.get("ceiling")),
                    in_progress=_int(raw.get("inProgress")),
                    completed=_int(raw.get("completed")),
                    failed=_int(raw.get("failed")),
                    batch=_int(batch_state.get("currentBatch"), 1)
                    if isinstance(batch_state, Mapping)
                    else None,
                    checks=_checks_text(raw.get("checks")),
                    stopped=_stopped_reason(conditions, str(comp_name))
                    or (
                        "stopped by failureThreshold"
                        if isinstance(batch_state, Mapping) and batch_state.get("shouldStop")
                        else ""
                    ),
                )
            )
    failures = tuple(
        {str(k): str(v) for k, v in f.items()}
        for f in (status.get("recentFailures") or ())
        if isinstance(f, Mapping)
    )
    packages = str(status.get("packageList") or "")
    if not packages and cr is not None:
        packages = ",".join(f"{n}:{p.version}" for n, p in sorted(cr.spec.packages.items()))
    policy_name = str(status.get("policy") or "")
    if not policy_name and cr is not None:
        policy_name = cr.spec.deployment_policy or ""
    return batches_reached(
        RolloutView(
            name=name,
            generation=generation,
            observed_generation=_int(observed) if observed is not None else None,
            status=str(status.get("status") or "unknown"),
            complete_nodes=str(status.get("completeNodes") or f"0/{len(rows)}"),
            packages=packages,
            policy=policy_name,
            conditions=tuple(conditions),
            compartments=tuple(comp_rows),
            nodes=tuple(rows),
            recent_failures=failures,
            problems=tuple(problems),
            checks=str(status.get("checks") or ""),
        )
    )


def _checks_text(raw: object) -> str:
    """``{compliant: 3, changing: 1}`` as ``3 compliant, 1 changing`` (zeros left out)."""
    if not isinstance(raw, Mapping):
        return ""
    kinds = ("compliant", "changing", "unknown")
    return ", ".join(f"{_int(raw.get(k))} {k}" for k in kinds if _int(raw.get(k)))


def _empty_default(name: str, raw: Mapping[str, Any]) -> bool:
    """The policy's ``__default__`` compartment with no node: nothing to show."""
    counters = ("matched", "inProgress", "completed", "failed")
    return name == DEFAULT_COMPARTMENT and not any(_int(raw.get(k)) for k in counters)


def remember_batches(view: RolloutView, memory: dict[str, tuple[str, int]]) -> RolloutView:
    """Fill in batch numbers seen earlier in a watch (a node leaving the selector loses its record).

    ``memory`` (node -> (compartment, batch)) is updated with the batches ``view`` shows; each
    compartment's batch is then the last one its nodes reached (``batches_reached``).
    """
    rows = []
    for row in view.nodes:
        if row.batch is not None:
            memory[row.name] = (row.compartment, row.batch)
            rows.append(row)
        elif row.name in memory:
            compartment, batch = memory[row.name]
            rows.append(replace(row, compartment=row.compartment or compartment, batch=batch))
        else:
            rows.append(row)
    return batches_reached(replace(view, nodes=tuple(rows)))


def batches_reached(view: RolloutView) -> RolloutView:
    """Each compartment's batch: the highest batch one of its nodes was picked in, else the
    batch state's ``currentBatch``.

    The batch state counts ahead (it opens the next batch before a node is in it) and starts
    again at 1 when it is reset on completion (``resetBatchStateOnCompletion``); the nodes'
    records say which batch the rollout actually reached, so the number only grows.
    """
    reached: dict[str, int] = {}
    for row in view.nodes:
        if row.batch is not None and row.compartment:
            reached[row.compartment] = max(reached.get(row.compartment, 0), row.batch)
    comps = tuple(
        replace(c, batch=reached[c.name]) if c.name in reached else c for c in view.compartments
    )
    return replace(view, compartments=comps)


# ---- rendering --------------------------------------------------------------------------------


def _styled(status: str) -> Text:
    return Text(status, style=_STATUS_STYLE.get(status, ""))


def _short(text: str, width: int = MESSAGE_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def header(view: RolloutView) -> Text:
    text = Text()
    text.append(f"NodeWright {view.name}", style="bold")
    text.append("  status ")
    text.append_text(_styled(view.status))
    text.append(f"  complete {view.complete_nodes}")
    if view.packages:
        text.append(f"  packages {view.packages}")
    if view.policy:
        text.append(f"  policy {view.policy}")
    if view.checks:
        text.append(f"  checks {view.checks}")
    if view.observed_generation is not None and view.observed_generation < view.generation:
        text.append(
            f"  (generation {view.generation} not yet observed; status is for "
            f"{view.observed_generation})",
            style="yellow",
        )
    return text


def conditions_table(view: RolloutView) -> Table:
    """Ready and Progressing always; other conditions only when True (the ones that matter)."""
    table = Table(title="conditions", title_justify="left", expand=False)
    for column in ("type", "status", "reason", "message"):
        table.add_column(column, overflow="fold")
    for cond in view.conditions:
        if cond.type not in ("Ready", "Progressing") and cond.status != "True":
            continue
        style = ""
        if cond.type in ("Degraded", "Stalled", "PDBBlocked", "InvalidSpec") and (
            cond.status == "True"
        ):
            style = "red"
        elif cond.type == "Ready" and cond.status == "True":
            style = "green"
        table.add_row(
            cond.type, Text(cond.status, style=style), cond.reason, _short(cond.message, 160)
        )
    return table


def compartments_table(view: RolloutView) -> Table:
    table = Table(title="compartments", title_justify="left")
    for column in (
        "compartment",
        "strategy",
        "matched",
        "ceiling",
        "batch",
        "in progress",
        "completed",
        "failed",
        "stopped",
    ):
        table.add_column(column)
    checked = any(c.checks for c in view.compartments)
    if checked:
        table.add_column("checks")
    for comp in view.compartments:
        extra = (comp.checks or "-",) if checked else ()
        table.add_row(
            comp.name,
            comp.strategy or "-",
            str(comp.matched),
            str(comp.ceiling),
            str(comp.batch) if comp.batch is not None else "-",
            str(comp.in_progress),
            Text(str(comp.completed), style="green" if comp.completed else ""),
            Text(str(comp.failed), style="red" if comp.failed else ""),
            Text(_short(comp.stopped, 60), style="red") if comp.stopped else "",
            *extra,
        )
    return table


def nodes_table(
    view: RolloutView,
    *,
    max_rows: int | None = None,
    title: str = "nodes",
    by_compartment: bool = False,
) -> Table:
    """Nodes, most urgent first (or by compartment and name); beyond ``max_rows`` one line counts
    the rest by status."""
    table = Table(title=title, title_justify="left")
    for column in ("node", "compartment", "batch", "status", "package", "stage", "state", "tries"):
        table.add_column(column)
    table.add_column("last failure", overflow="fold")
    ordered = (
        sorted(view.nodes, key=lambda r: (r.compartment, r.name)) if by_compartment else view.nodes
    )
    rows = ordered if max_rows is None else ordered[:max_rows]
    for row in rows:
        failing = row.state == "erroring" or row.status == "erroring"
        table.add_row(
            row.name,
            row.compartment or "-",
            str(row.batch) if row.batch is not None else "-",
            _styled(row.status),
            f"{row.package} {row.version}".strip() or "-",
            row.stage or "-",
            f"{row.state} ({row.check})" if row.check and row.state else (row.state or "-"),
            str(row.attempts) if row.attempts else "-",
            Text(_short(row.message), style="red") if failing and row.message else "",
        )
    rest = ordered[len(rows) :]
    if rest:
        counts: dict[str, int] = {}
        for row in rest:
            counts[row.status] = counts.get(row.status, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        table.add_row(f"… {len(rest)} more", "", "", summary, "", "", "", "", "")
    return table


def render(view: RolloutView, *, max_nodes: int | None = 40) -> RenderableType:
    """The whole live display."""
    parts: list[RenderableType] = [header(view)]
    parts += [Text(f"! {p}", style="yellow") for p in view.problems]
    if view.conditions:
        parts.append(conditions_table(view))
    if view.compartments:
        parts.append(compartments_table(view))
    parts.append(nodes_table(view, max_rows=max_nodes))
    if view.recent_failures:
        failures = Table(title="recent failures", title_justify="left")
        for column in ("time", "node", "package", "stage", "task", "message"):
            failures.add_column(column, overflow="fold")
        for f in view.recent_failures[-5:]:
            failures.add_row(
                f.get("time", ""),
                f.get("node", ""),
                f"{f.get('package', '')} {f.get('version', '')}".strip(),
                f.get("stage", ""),
                f.get("task", ""),
                _short(f.get("message", ""), 100),
            )
        parts.append(failures)
    return Group(*parts)


def summary_table(view: RolloutView) -> Table:
    """Every node with every package it records (one line each), by compartment and name."""
    table = Table(title="per-node summary", title_justify="left")
    for column in ("node", "compartment", "batch", "status", "package", "stage", "state"):
        table.add_column(column)
    table.add_column("last failure", overflow="fold")
    for row in sorted(view.nodes, key=lambda r: (r.compartment, r.name)):
        failing = row.state == "erroring" or row.status == "erroring"
        entries = row.packages or (PackageRow(row.package, row.version, row.stage, row.state),)
        table.add_row(
            row.name,
            row.compartment or "-",
            str(row.batch) if row.batch is not None else "-",
            _styled(row.status),
            "\n".join(f"{e.package} {e.version}".strip() or "-" for e in entries),
            "\n".join(e.stage or "-" for e in entries),
            "\n".join(e.state or "-" for e in entries),
            Text(_short(row.message), style="red") if failing and row.message else "",
        )
    return table


def summary(view: RolloutView) -> RenderableType:
    """The final per-node summary (every node, every package) with a one-line verdict."""
    counts = view.counts()
    verdict = {
        TERMINAL_OK: Text("rollout complete", style="bold green"),
        TERMINAL_STALLED: Text("rollout stalled (failureThreshold reached)", style="bold red"),
        TERMINAL_DEGRADED: Text("rollout degraded: nodes failed", style="bold red"),
    }.get(view.outcome or "", Text("rollout not finished", style="bold yellow"))
    line = Text(f"NodeWright {view.name}: ")
    line.append_text(verdict)
    line.append(
        "  (" + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")" if counts else ""
    )
    return Group(summary_table(view), line)


# ---- progress lines (non-interactive watch) -----------------------------------------------------


def _node_line(row: NodeRow) -> str:
    what = f"{row.package} {row.version} {row.stage} {row.state}".strip() if row.package else ""
    tries = f" (attempt {row.attempts})" if row.attempts > 1 else ""
    where = f" [{row.compartment} batch {row.batch}]" if row.batch is not None else ""
    fail = f": {_short(row.message, 160)}" if row.message and row.status == "erroring" else ""
    return f"node {row.name}{where}: {row.status}" + (f", {what}" if what else "") + tries + fail


def _compartment_line(comp: CompartmentRow) -> str:
    text = (
        f"compartment {comp.name}: batch {comp.batch if comp.batch is not None else '-'}, "
        f"{comp.completed}/{comp.matched} complete, {comp.in_progress} in progress, "
        f"{comp.failed} failed"
    )
    return text + (f", stopped: {comp.stopped}" if comp.stopped else "")


def progress_lines(previous: RolloutView | None, current: RolloutView) -> list[str]:
    """Lines describing what changed since ``previous`` (everything when it is None)."""
    lines: list[str] = []
    if previous is None or (previous.status, previous.complete_nodes) != (
        current.status,
        current.complete_nodes,
    ):
        lines.append(
            f"rollout {current.name}: {current.status}, {current.complete_nodes} nodes complete"
        )
    before_comps = {c.name: c for c in previous.compartments} if previous else {}
    for comp in current.compartments:
        if before_comps.get(comp.name) != comp:
            lines.append(_compartment_line(comp))
    before_nodes = {r.name: r for r in previous.nodes} if previous else {}
    for row in sorted(current.nodes, key=lambda r: r.name):
        old = before_nodes.get(row.name)
        if old is None or (old.status, old.package, old.stage, old.state, old.attempts) != (
            row.status,
            row.package,
            row.stage,
            row.state,
            row.attempts,
        ):
            lines.append(_node_line(row))
    before_conds = {c.type: c for c in previous.conditions} if previous else {}
    for cond in current.conditions:
        old_cond = before_conds.get(cond.type)
        important = cond.type in ("Degraded", "Stalled", "PDBBlocked", "InvalidSpec")
        if important and cond.status == "True" and (old_cond is None or old_cond != cond):
            lines.append(f"condition {cond.type}: {cond.reason}: {_short(cond.message, 200)}")
    return lines
