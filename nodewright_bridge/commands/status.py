"""``nwb status [NAME] [--watch] [-o table|json]``: live progress of a rollout, from the API.

What it shows (built by :mod:`nodewright_bridge.rolloutview`): the CR's status and conditions, each
compartment (matched, ceiling, current batch, in progress, completed, failed, why it stopped) and
each targeted node (status, current package / stage / state, attempts, last failure) read from the
Nodes' ``bridge.nodewright.io/*-<cr>`` label and annotations, and from the CR's pods where a pod
carries its start (``lifecycle.pod_records``: such a node shows in progress).

API use is bounded and independent of the refresh rate:
- one-shot: GET the CR, GET its DeploymentPolicy, LIST the targeted Nodes (label selector from the
  CR's nodeSelectors, pages of 500), LIST the CR's pods - four requests for up to 500 nodes;
- ``--watch``: the same GET of the policy plus one list+watch each of the CR (field selector on
  its name), the targeted Nodes and the CR's pods, through the controller's informers. The
  display refreshes from those caches; nothing is polled.

``--watch`` ends when the rollout is Ready (exit 0), Stalled or Degraded with nothing left in
progress (exit 1), on Ctrl-C (exit 130) or after ``--timeout`` (exit 1), and then prints a per-node
summary. ``--no-live`` prints one line per change instead of a refreshing display (logs, CI, the
e2e test). ``-o json`` prints the view as JSON (with ``--watch``: one JSON document per change).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from lifecycle.nodestate import batch_annotation, state_annotation, status_key
from nodewright_bridge.commands import rolloutview
from nodewright_bridge.commands.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    PAGE_SIZE,
    CommandError,
    connect,
    kube_options,
    list_all,
)
from nodewright_bridge.controller import podspec
from nodewright_bridge.errors import ApiError, NotFoundError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.k8s.slimming import slim_pod
from nodewright_bridge.k8s.watching import Informer, InformerSpec

JsonObject = dict[str, Any]
SYNC_TIMEOUT_SECONDS = 60.0
_OUTCOME_EXIT = {
    rolloutview.TERMINAL_OK: EXIT_OK,
    rolloutview.TERMINAL_STALLED: EXIT_FAILED,
    rolloutview.TERMINAL_DEGRADED: EXIT_FAILED,
}


def wide_console() -> Console:
    """A console; when output is not a terminal, wide enough for the tables (not 80 columns)."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


# ---- one-shot reads -----------------------------------------------------------------------------


def get_policy(rest: Rest, cr_obj: Mapping[str, Any]) -> JsonObject | None:
    name = ((cr_obj.get("spec") or {}).get("deploymentPolicy")) or ""
    if not name:
        return None
    try:
        return rest.get(resources.DEPLOYMENT_POLICIES, str(name))
    except NotFoundError:
        return None


def node_selector(cr_obj: Mapping[str, Any]) -> str | None:
    """The server-side filter for the CR's nodes (None: the CR does not validate; list all)."""
    cr = rolloutview.parse_cr(cr_obj)
    if cr is None:
        return None
    return rolloutview.selector_string(cr.spec.node_selectors) or None


def read_view(rest: Rest, name: str) -> rolloutview.RolloutView:
    """Four requests (plus pages beyond 500): CR, policy, targeted Nodes, the CR's pods (a
    node whose pod carries its start shows in progress)."""
    try:
        cr_obj = rest.get(resources.NODEWRIGHTS, name)
    except NotFoundError:
        raise CommandError(f"NodeWright {name!r} not found") from None
    policy = get_policy(rest, cr_obj)
    nodes = list_all(rest, resources.NODES, label_selector=node_selector(cr_obj))
    pods = list_all(
        rest,
        resources.PODS,
        namespace=podspec.NAMESPACE,
        label_selector=f"{podspec.LABEL_CR}={name}",
    )
    return rolloutview.build_view(cr_obj, nodes, policy_obj=policy, pods=pods)


def resolve_name(rest: Rest, name: str | None) -> str | list[JsonObject]:
    """``name``, the only CR's name, or every CR when there are several (for a listing)."""
    if name:
        return name
    crs = list_all(rest, resources.NODEWRIGHTS)
    if not crs:
        raise CommandError("no NodeWright found in the cluster")
    if len(crs) == 1:
        return str(crs[0]["metadata"]["name"])
    return crs


def listing_table(crs: list[JsonObject]) -> Table:
    table = Table(title="NodeWrights (name one to see its nodes)", title_justify="left")
    for column in ("name", "status", "complete", "in progress", "packages", "policy"):
        table.add_column(column)
    for cr in sorted(crs, key=lambda c: str(c["metadata"]["name"])):
        status = cr.get("status") or {}
        table.add_row(
            str(cr["metadata"]["name"]),
            str(status.get("status") or "unknown"),
            str(status.get("completeNodes") or "-"),
            str(status.get("nodesInProgress") or 0),
            str(status.get("packageList") or "-"),
            str(status.get("policy") or (cr.get("spec") or {}).get("deploymentPolicy") or "-"),
        )
    return table


# ---- watching -----------------------------------------------------------------------------------


def _slim_node_for(cr_name: str) -> Callable[[JsonObject], JsonObject]:
    """Keep a Node's name, labels and only our annotations (a 5,000-node watch stays small)."""
    ours = {state_annotation(cr_name), batch_annotation(cr_name), status_key(cr_name)}

    def slim(obj: JsonObject) -> JsonObject:
        meta = obj.get("metadata") or {}
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in ours}
        return {
            "metadata": {
                "name": meta.get("name"),
                "resourceVersion": meta.get("resourceVersion"),
                "labels": meta.get("labels") or {},
                "annotations": annotations,
            }
        }

    return slim


class _Changed:
    """Informer handler: sets an event on any change (the display redraws from the stores)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def on_add(self, obj: JsonObject) -> None:
        self.event.set()

    def on_update(self, old: JsonObject, new: JsonObject) -> None:
        self.event.set()

    def on_delete(self, obj: JsonObject) -> None:
        self.event.set()


@dataclass
class Watch:
    """List+watch of the CR, its Nodes and its pods; views are built from the caches."""

    rest: Rest
    name: str
    changed: threading.Event
    cr: Informer | None = None
    nodes: Informer | None = None
    pods: Informer | None = None
    policy: JsonObject | None = None

    def start(self) -> None:
        try:
            first = self.rest.get(resources.NODEWRIGHTS, self.name)
        except NotFoundError:
            raise CommandError(f"NodeWright {self.name!r} not found") from None
        self.policy = get_policy(self.rest, first)
        handler = _Changed(self.changed)
        self.cr = Informer(
            self.rest,
            InformerSpec(
                name="nodewright",
                resource=resources.NODEWRIGHTS,
                field_selector=f"metadata.name={self.name}",
            ),
        )
        self.nodes = Informer(
            self.rest,
            InformerSpec(
                name="nodes",
                resource=resources.NODES,
                label_selector=node_selector(first),
                slim=_slim_node_for(self.name),
                page_size=PAGE_SIZE,
            ),
        )
        self.pods = Informer(
            self.rest,
            InformerSpec(
                name="pods",
                resource=resources.PODS,
                namespace=podspec.NAMESPACE,
                label_selector=f"{podspec.LABEL_CR}={self.name}",
                slim=slim_pod,
            ),
        )
        for informer in (self.cr, self.nodes, self.pods):
            informer.add_handler(handler)
            informer.start()
        for informer in (self.cr, self.nodes, self.pods):
            if not informer.wait_for_sync(SYNC_TIMEOUT_SECONDS):
                self.stop()
                raise CommandError(f"could not list {informer.spec.name} within 60s")

    def view(self) -> rolloutview.RolloutView | None:
        """The current view, or None once the CR is gone."""
        assert self.cr is not None and self.nodes is not None and self.pods is not None
        crs = self.cr.store.values()
        if not crs:
            return None
        return rolloutview.build_view(
            crs[0], self.nodes.store.values(), policy_obj=self.policy, pods=self.pods.store.values()
        )

    def stop(self) -> None:
        for informer in (self.cr, self.nodes, self.pods):
            if informer is not None:
                informer.stop()


def _emit_json(view: rolloutview.RolloutView, out: TextIO, *, pretty: bool) -> None:
    out.write(json.dumps(view.to_json(), indent=2 if pretty else None) + "\n")
    out.flush()


def watch(
    rest: Rest,
    name: str,
    *,
    output: str,
    live: bool,
    interval: float,
    timeout: float | None,
    max_nodes: int,
    console: Console,
    on_tick: Callable[[], str | None] | None = None,
) -> int:
    """Follow ``name`` until it ends; returns the exit code. ``on_tick`` may return a reason to
    stop (the demo uses it to notice a dead controller)."""
    changed = threading.Event()
    follow = Watch(rest, name, changed)
    follow.start()
    started = time.monotonic()
    previous: rolloutview.RolloutView | None = None
    view: rolloutview.RolloutView | None = None
    code: int | None = None
    reason = ""
    batches: dict[str, tuple[str, int]] = {}
    display: Live | None = None
    try:
        if live and output == "table":
            display = Live(console=console, refresh_per_second=4, transient=False)
            display.start()
        while code is None:
            view = follow.view()
            if view is None:
                reason = f"NodeWright {name!r} was deleted"
                code = EXIT_FAILED
                break
            view = rolloutview.remember_batches(view, batches)
            if output == "json":
                if previous is None or view.to_json() != previous.to_json():
                    _emit_json(view, sys.stdout, pretty=False)
            elif display is not None:
                elapsed = time.monotonic() - started
                display.update(
                    rolloutview.render(view, max_nodes=max_nodes),
                    refresh=True,
                )
                display.console.set_window_title(f"nwb status {name} ({elapsed:.0f}s)")
            else:
                stamp = f"[{time.monotonic() - started:6.1f}s]"
                for line in rolloutview.progress_lines(previous, view):
                    console.print(f"{stamp} {line}", highlight=False, markup=False, soft_wrap=True)
            previous = view
            if view.outcome is not None:
                code = _OUTCOME_EXIT[view.outcome]
                break
            if on_tick is not None:
                stop_reason = on_tick()
                if stop_reason:
                    reason = stop_reason
                    code = EXIT_FAILED
                    break
            if timeout is not None and time.monotonic() - started > timeout:
                reason = f"timed out after {timeout:.0f}s"
                code = EXIT_FAILED
                break
            changed.wait(interval)
            changed.clear()
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
        reason = "interrupted"
        latest = follow.view()
        view = rolloutview.remember_batches(latest, batches) if latest is not None else view
    finally:
        if display is not None:
            display.stop()
        follow.stop()
    if output == "table" and view is not None:
        console.print(rolloutview.summary(view))
    if reason:
        console.print(reason, style="yellow", highlight=False, markup=False)
    return code


@click.command(name="status")
@click.argument("name", required=False)
@click.option("-w", "--watch", "follow", is_flag=True, help="Follow the rollout until it ends.")
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people; json (stable keys) for scripts.",
)
@click.option(
    "--live/--no-live",
    default=None,
    help="With --watch: a refreshing display (default on a terminal) or one line per change.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=2.0,
    show_default=True,
    help="Seconds between redraws when nothing changed (changes redraw at once).",
)
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=None, help="Give up after SECONDS (exit 1)."
)
@click.option(
    "--max-nodes",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Node rows in the table; the rest are counted by status.",
)
@kube_options()
def command(  # noqa: PLR0917 - click passes options positionally
    name: str | None,
    follow: bool,
    output: str,
    live: bool | None,
    interval: float,
    timeout: float | None,
    max_nodes: int,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Show the progress of a NodeWright rollout: compartments, batches, every node.

    Without NAME: the only NodeWright in the cluster, or a list of all of them.
    """
    console = wide_console()
    try:
        rest = connect(kubeconfig, kube_context)
        target = resolve_name(rest, name)
        if isinstance(target, list):
            if follow:
                raise CommandError(
                    "several NodeWrights exist; name the one to watch: "
                    + ", ".join(sorted(str(c["metadata"]["name"]) for c in target)),
                    EXIT_BAD_INPUT,
                )
            if output == "json":
                click.echo(json.dumps([c["metadata"]["name"] for c in target], indent=2))
            else:
                console.print(listing_table(target))
            return
        if not follow:
            view = read_view(rest, target)
            if output == "json":
                _emit_json(view, sys.stdout, pretty=True)
            else:
                console.print(rolloutview.render(view, max_nodes=max_nodes))
            return
        use_live = live if live is not None else console.is_terminal
        code = watch(
            rest,
            target,
            output=output,
            live=use_live,
            interval=interval,
            timeout=timeout,
            max_nodes=max_nodes,
            console=console,
        )
    except CommandError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(exc.code) from None
    except ApiError as exc:
        click.echo(f"error: the API server refused or is unreachable: {exc}", err=True)
        raise click.exceptions.Exit(EXIT_FAILED) from None
    raise click.exceptions.Exit(code)
