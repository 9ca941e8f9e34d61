"""``nwb plan``: which nodes go in which batch, and where the rollout would stop, before applying.

Why a simulation and not a formula: batch sizes depend on earlier outcomes (failed batches shrink
the next one, failureThreshold stops a compartment), so the command drives the real planner
(``lifecycle.rollout.plan_rollout``) step by step with every node succeeding except the ones named
with ``--fail``. ``--offline`` reads the CR, the policy and the nodes from files; ``--live`` reads
the nodes (with their current per-node state), the PDBs, and the CR (``--name``) and its policy
from a cluster (see ``nodewright_bridge.commands.plan_live``).

Offline assumptions: every node the CR targets has work to do (the CR is being rolled out to all
of them) and no node holds a batch record yet (a fresh rollout).

Bad input (YAML errors, spec validation errors, an unknown ``--fail`` node, a policy that is not
the one the CR names) exits 2 with one ``file: path: message`` line per problem.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Table

from lifecycle import selectors, simulation, validation
from lifecycle.errors import SpecError
from lifecycle.rollout import NodeView
from lifecycle.spec import DeploymentPolicy, NodeWright
from lifecycle.status import Status
from nodewright_bridge.commands import common

# Simulated start time: fixed so that the same files always give the same plan (only BatchRecord
# timestamps carry it, and they are not printed).
SIMULATION_START = datetime(2025, 1, 1, tzinfo=UTC)
_NODE_KINDS = {"List", "NodeList"}


class BadInputError(Exception):
    """Input problems, one ``file: path: message`` line each (exit code 2)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def _read_yaml(path: Path, label: str) -> list[Any]:
    """All YAML documents of ``path`` (empty ones dropped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInputError([f"{label} {path}: cannot read: {exc.strerror or exc}"]) from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInputError([f"{path}: {where}invalid YAML: {problem}"]) from None
    return docs


def _single(path: Path, docs: list[Any], kind: str) -> Any:
    if len(docs) != 1:
        raise BadInputError([f"{path}: expected exactly one {kind} document, found {len(docs)}"])
    return docs[0]


def load_cr(path: Path) -> NodeWright:
    """Read and validate a NodeWright file."""
    doc = _single(path, _read_yaml(path, "-f"), "NodeWright")
    try:
        return validation.load_nodewright(doc)
    except SpecError as exc:
        raise BadInputError([f"{path}: {p}" for p in exc.problems]) from None


def load_policy(path: Path) -> DeploymentPolicy:
    """Read and validate a DeploymentPolicy file."""
    doc = _single(path, _read_yaml(path, "-p"), "DeploymentPolicy")
    try:
        return validation.load_policy(doc)
    except SpecError as exc:
        raise BadInputError([f"{path}: {p}" for p in exc.problems]) from None


def _timestamp(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    raise ValueError(f"not a timestamp: {value!r}")


def _str_map(value: Any, path: str, problems: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(f"{path}: expected a mapping of strings")
        return {}
    out: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, bool):  # unquoted true/false in a hand-written file
            out[str(key)] = str(item).lower()
        elif isinstance(item, str | int | float):
            out[str(key)] = str(item)
        else:
            problems.append(f"{path}.{key}: expected a string")
    return out


def _taints(value: Any, path: str, problems: list[str]) -> tuple[selectors.Taint, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append(f"{path}: expected a list of taints")
        return ()
    taints: list[selectors.Taint] = []
    effects = {e.value: e for e in selectors.TaintEffect}
    for i, raw in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(raw, Mapping) or not isinstance(raw.get("key"), str):
            problems.append(f"{where}.key: required field is missing")
            continue
        effect = effects.get(str(raw.get("effect")))
        if effect is None:
            problems.append(
                f"{where}.effect: must be one of {', '.join(effects)}, got {raw.get('effect')!r}"
            )
            continue
        taints.append(
            selectors.Taint(key=raw["key"], effect=effect, value=str(raw.get("value") or ""))
        )
    return tuple(taints)


def node_from_object(obj: Any, where: str, problems: list[str]) -> NodeView | None:
    """A NodeView from one Node object (as ``kubectl get node -o yaml`` prints it).

    Appends ``where.field: message`` lines to ``problems`` and returns None when unusable.
    """
    if not isinstance(obj, Mapping):
        problems.append(f"{where}: expected a Node object (a mapping)")
        return None
    kind = obj.get("kind", "Node")
    if kind != "Node":
        problems.append(f"{where}.kind: expected Node, got {kind!r}")
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        problems.append(f"{where}.metadata.name: required field is missing")
        return None
    before = len(problems)
    labels = _str_map(meta.get("labels"), f"{where}.metadata.labels", problems)
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        problems.append(f"{where}.spec: expected a mapping")
        spec = {}
    taints = _taints(spec.get("taints"), f"{where}.spec.taints", problems)
    created: datetime | None = None
    if meta.get("creationTimestamp") is not None:
        try:
            created = _timestamp(meta["creationTimestamp"])
        except ValueError:
            problems.append(
                f"{where}.metadata.creationTimestamp: not an RFC 3339 time: "
                f"{meta['creationTimestamp']!r}"
            )
    if len(problems) != before:
        return None
    return NodeView(
        name=meta["name"],
        labels=labels,
        taints=taints,
        created=created,
        status=Status.WAITING,
        has_pending_work=True,
    )


def load_nodes(path: Path) -> list[NodeView]:
    """Nodes from a ``kubectl get nodes -o yaml`` List, a NodeList, a YAML list or Node docs."""
    docs = _read_yaml(path, "--nodes")
    items: list[tuple[str, Any]] = []
    if len(docs) == 1 and isinstance(docs[0], list):
        items = [(f"[{i}]", item) for i, item in enumerate(docs[0])]
    elif len(docs) == 1 and isinstance(docs[0], Mapping) and docs[0].get("kind") in _NODE_KINDS:
        raw = docs[0].get("items") or []
        if not isinstance(raw, list):
            raise BadInputError([f"{path}: items: expected a list of Node objects"])
        items = [(f"items[{i}]", item) for i, item in enumerate(raw)]
    else:
        items = [(f"document {i + 1}", item) for i, item in enumerate(docs)]
    problems: list[str] = []
    nodes: list[NodeView] = []
    seen: dict[str, str] = {}
    for where, obj in items:
        node = node_from_object(obj, where, problems)
        if node is None:
            continue
        if node.name in seen:
            problems.append(f"{where}.metadata.name: {node.name!r} is also {seen[node.name]}")
            continue
        seen[node.name] = where
        nodes.append(node)
    if problems:
        raise BadInputError([f"{path}: {p}" for p in problems])
    if not nodes:
        raise BadInputError([f"{path}: no Node objects found"])
    return nodes


def check_inputs(
    cr: NodeWright,
    policy: DeploymentPolicy | None,
    nodes: Sequence[NodeView],
    fail: Sequence[str],
    *,
    policy_path: Path | None,
) -> None:
    """Cross-file checks: the policy is the one the CR names; ``--fail`` names targeted nodes."""
    problems: list[str] = []
    wanted = cr.spec.deployment_policy
    if wanted and policy is None:
        problems.append(
            f'spec.deploymentPolicy: the NodeWright uses policy "{wanted}"; pass it with -p'
        )
    elif policy is not None and not wanted:
        problems.append(
            f'{policy_path}: metadata.name: policy "{policy.metadata.name}" given, but the '
            "NodeWright sets no spec.deploymentPolicy (it uses interruptionBudget)"
        )
    elif policy is not None and policy.metadata.name != wanted:
        problems.append(
            f'{policy_path}: metadata.name: "{policy.metadata.name}" is not the policy the '
            f'NodeWright names in spec.deploymentPolicy ("{wanted}")'
        )
    names = {n.name: n for n in nodes}
    for name in fail:
        node = names.get(name)
        if node is None:
            problems.append(f"--fail: node {name!r} is not in the --nodes file")
        elif not selectors.matches(cr.spec.node_selectors, node.labels):
            problems.append(
                f"--fail: node {name!r} is not targeted by the NodeWright (spec.nodeSelectors)"
            )
    if problems:
        raise BadInputError(problems)


def render_table(cr: NodeWright, sim: simulation.Simulation, console: Console) -> None:
    """Human output: compartments, ordered batches, and where/why the rollout ends."""
    compartments = Table(title=f"NodeWright {cr.metadata.name}: compartments")
    for column in ("compartment", "strategy", "matched", "ceiling", "batches", "outcome"):
        compartments.add_column(column)
    failed = set(sim.failed)
    for name, status in sim.compartments.items():
        count = sum(1 for b in sim.batches if b.compartment == name)
        if name in sim.stopped:
            outcome = "[red]stopped[/red]"
        elif status.matched == 0:
            outcome = "no nodes"
        else:
            nodes = sim.final.assignment if sim.final is not None else {}
            broken = [n for n, c in nodes.items() if c == name and n in sim.unfinished]
            outcome = "[green]complete[/green]" if not broken else f"{len(broken)} not done"
        compartments.add_row(
            name,
            status.strategy or "-",
            str(status.matched),
            str(status.ceiling),
            str(count),
            outcome,
        )
    console.print(compartments)

    batches = Table(title="batches in start order")
    for column in ("#", "compartment", "batch", "size", "nodes", "result"):
        batches.add_column(column)
    for i, batch in enumerate(sim.batches, start=1):
        bad = [n for n in batch.nodes if n in failed]
        result = f"[red]{len(bad)} failed[/red]" if bad else "[green]ok[/green]"
        batches.add_row(
            str(i),
            batch.compartment,
            str(batch.batch),
            str(len(batch.nodes)),
            ", ".join(batch.nodes),
            result,
        )
    console.print(batches)

    for name, reason in sim.stopped.items():
        console.print(f"[red]stopped[/red] {name}: {reason}", highlight=False)
    if sim.failed:
        console.print(f"failed nodes: {', '.join(sim.failed)}", highlight=False)
    for node, reason in sim.blocked.items():
        console.print(f"[yellow]blocked[/yellow] {node}: {reason}", highlight=False)
    if sim.ignored:
        console.print(f"ignored (label ignore=true): {', '.join(sim.ignored)}", highlight=False)
    left = [n for n in sim.unfinished if n not in failed]
    if left:
        console.print(f"never started: {', '.join(left)}", highlight=False)
    if not sim.unfinished:
        console.print("[green]every targeted node completes[/green]")


def _plan_live(
    *,
    cr_path: Path | None,
    name: str | None,
    policy_path: Path | None,
    fail: Sequence[str],
    output: str,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """``--live``: CR from -f or --name, nodes, their state and PDBs from the cluster."""
    from nodewright_bridge.commands import plan_live  # noqa: PLC0415 - needs the client

    if (cr_path is None) == (name is None):
        raise BadInputError(["--live: give exactly one of -f CR.yaml or --name NAME"])
    problems: list[str] = []
    cr = policy = None
    if cr_path is not None:
        try:
            cr = load_cr(cr_path)
        except BadInputError as exc:
            problems += exc.problems
    if policy_path is not None:
        try:
            policy = load_policy(policy_path)
        except BadInputError as exc:
            problems += exc.problems
    if problems:
        raise BadInputError(problems)
    if cr is not None and policy is not None:
        check_inputs(cr, policy, [], (), policy_path=policy_path)
    try:
        rest = common.connect(kubeconfig, kube_context)
        inputs, sim = plan_live.plan(
            rest,
            file_cr=cr,
            name=name,
            file_policy=policy,
            fail=fail,
            now=datetime.now(tz=UTC),
        )
    except common.CommandError as exc:
        raise BadInputError([str(exc)]) from None
    except plan_live.LiveInputError as exc:
        raise BadInputError(exc.problems) from None
    if output == "json":
        click.echo(json.dumps(plan_live.to_json(inputs, sim), indent=2))
    else:
        console = Console()
        render_table(inputs.cr, sim, console)
        plan_live.render_extra(inputs, console)


@click.command(name="plan")
@click.option("--offline", is_flag=True, help="Plan from files only; no cluster is contacted.")
@click.option(
    "--live",
    is_flag=True,
    help="Plan against the cluster: nodes, their current state and PDBs from the API.",
)
@click.option(
    "-f",
    "--filename",
    "cr_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="NodeWright YAML file (required with --offline).",
)
@click.option("--name", help="--live: plan the NodeWright of this name that exists in the cluster.")
@click.option(
    "-p",
    "--policy",
    "policy_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="DeploymentPolicy YAML file (the one the NodeWright names).",
)
@click.option(
    "--nodes",
    "nodes_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Nodes: `kubectl get nodes -o yaml` output or a YAML list of Node objects.",
)
@click.option(
    "--fail", "fail", multiple=True, metavar="NODE", help="Simulate this node failing (repeatable)."
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output format; json is stable for scripts.",
)
@common.kube_options(help_prefix="--live: ")
def command(
    *,
    offline: bool,
    live: bool,
    cr_path: Path | None,
    name: str | None,
    policy_path: Path | None,
    nodes_path: Path | None,
    fail: tuple[str, ...],
    output: str,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Show which nodes go in which batch, before anything is applied.

    Simulates the rollout with the real planner: every node succeeds except the --fail ones.
    Prints the compartments (matched nodes, ceiling), the batches in the order they start and
    where and why the rollout stops. Exit 2 on bad input, one line per problem.
    """
    try:
        if live and offline:
            raise BadInputError(["--live, --offline: choose one"])
        if live:
            if nodes_path is not None:
                raise BadInputError(["--nodes: only with --offline (--live reads the cluster)"])
            _plan_live(
                cr_path=cr_path,
                name=name,
                policy_path=policy_path,
                fail=fail,
                output=output,
                kubeconfig=kubeconfig,
                kube_context=kube_context,
            )
            return
        if not offline:
            raise BadInputError(["--offline or --live: required (files or the cluster)"])
        if cr_path is None:
            raise BadInputError(["-f: required with --offline"])
        if nodes_path is None:
            raise BadInputError(["--nodes: required with --offline"])
        problems: list[str] = []
        cr = policy = nodes = None
        try:
            cr = load_cr(cr_path)
        except BadInputError as exc:
            problems += exc.problems
        if policy_path is not None:
            try:
                policy = load_policy(policy_path)
            except BadInputError as exc:
                problems += exc.problems
        try:
            nodes = load_nodes(nodes_path)
        except BadInputError as exc:
            problems += exc.problems
        if problems:
            raise BadInputError(problems)
        assert cr is not None and nodes is not None  # no problems means every file loaded
        check_inputs(cr, policy, nodes, fail, policy_path=policy_path)
    except BadInputError as exc:
        for line in exc.problems:
            click.echo(line, err=True)
        raise click.exceptions.Exit(2) from None

    sim = simulation.simulate(cr, policy, nodes, start=SIMULATION_START, fail=frozenset(fail))
    if output == "json":
        click.echo(json.dumps(sim.to_json(), indent=2))
    else:
        render_table(cr, sim, Console())
