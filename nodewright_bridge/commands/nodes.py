"""``nwb nodes [NAME] [-o table|json]``: every node's state across NodeWrights.

One row per (node, CR) the node carries state of: the CR's status on the node, each package entry
(version, stage, state, attempts, a rerun mark), who holds the node cordoned (and whether it was
cordoned before we came), and the ignore label. Read from the Nodes' ``bridge.nodewright.io/*``
label and annotations in one paged list: no controller needed.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from lifecycle.nodestate import CORDON_ANNOTATION, IGNORE_LABEL
from lifecycle.spec import PREFIX
from nodewright_bridge.commands.changing import meta, reported
from nodewright_bridge.commands.common import JsonObject, connect, kube_options, list_all
from nodewright_bridge.commands.status import wide_console
from nodewright_bridge.controller import snapshot
from nodewright_bridge.k8s import resources

STATE_PREFIX = f"{PREFIX}state-"
STATUS_PREFIX = f"{PREFIX}status-"


def node_rows(nodes: list[JsonObject], only: str = "") -> list[dict[str, Any]]:
    """The rows ``nwb nodes`` shows, sorted by node then CR."""
    rows: list[dict[str, Any]] = []
    for node in nodes:
        m = meta(node)
        annotations = m.get("annotations") or {}
        labels = m.get("labels") or {}
        cordon = snapshot.parse_cordon(annotations.get(CORDON_ANNOTATION))
        crs = {k.removeprefix(STATE_PREFIX) for k in annotations if k.startswith(STATE_PREFIX)} | {
            k.removeprefix(STATUS_PREFIX) for k in labels if k.startswith(STATUS_PREFIX)
        }
        for cr in sorted(c for c in crs if not only or c == only):
            try:
                state = snapshot.parse_state(annotations.get(f"{STATE_PREFIX}{cr}"))
                problem = ""
            except ValueError as exc:
                state, problem = {}, f"state does not parse: {exc}"
            packages = [
                {
                    "package": key.partition("|")[0],
                    "version": key.partition("|")[2],
                    "stage": entry.stage.value,
                    "state": entry.state.value,
                    "attempts": entry.attempts,
                    "rerun": entry.rerun,
                    "message": entry.message,
                }
                for key, entry in sorted(state.items())
            ]
            rows.append(
                {
                    "node": str(m.get("name", "")),
                    "cr": cr,
                    "status": labels.get(f"{STATUS_PREFIX}{cr}")
                    or annotations.get(f"{STATUS_PREFIX}{cr}", "")
                    or "unknown",
                    "packages": packages,
                    "problem": problem,
                    "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
                    "cordonHolders": list(cordon.holders) if cordon else [],
                    "cordonedBefore": bool(cordon and cordon.was_unschedulable),
                    "ignored": labels.get(IGNORE_LABEL) == "true",
                }
            )
    return sorted(rows, key=lambda r: (r["node"], r["cr"]))


def _cordon_text(row: dict[str, Any]) -> str:
    if not row["unschedulable"]:
        return "-"
    holders = ", ".join(row["cordonHolders"])
    if row["cordonedBefore"] or not holders:
        return f"human{' + ' + holders if holders else ''}"
    return holders


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table(box=None, pad_edge=False)
    for column in ("NODE", "NODEWRIGHT", "STATUS", "PACKAGES", "CORDONED BY", "IGNORED"):
        table.add_column(column)
    for row in rows:
        packages = "\n".join(
            f"{p['package']} {p['version']} {p['stage']} {p['state']}"
            + (f" (attempt {p['attempts']})" if p["attempts"] else "")
            + (" rerun" if p["rerun"] else "")
            for p in row["packages"]
        )
        table.add_row(
            row["node"],
            row["cr"],
            row["status"],
            packages or row["problem"] or "-",
            _cordon_text(row),
            "yes" if row["ignored"] else "",
        )
    return table


@click.command(name="nodes")
@click.argument("name", required=False, default="")
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@kube_options()
def command(name: str, output: str, kubeconfig: str | None, kube_context: str | None) -> None:
    """Per-node state across NodeWrights (or of NAME only)."""
    with reported():
        rest = connect(kubeconfig, kube_context)
        rows = node_rows(list_all(rest, resources.NODES), name)
        if output == "json":
            click.echo(json.dumps(rows, indent=2))
        elif not rows:
            click.echo("no node carries NodeWright state" + (f" of {name}" if name else ""))
        else:
            wide_console().print(_table(rows))
