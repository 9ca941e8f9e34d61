"""``nwb rerun``, ``nwb reset``, ``nwb ignore`` and ``nwb unignore``: day-2 changes on nodes.

- ``rerun NAME --node N [--package P]`` marks the package entries on the node
  (``lifecycle.rerunning``); the controller runs them again once the rollout picks the node, on
  the normal paced path (cordon and drain first for a package with an interrupt).
- ``reset NAME [--node N] [--package P]`` forgets the CR's state on the node(s)
  (``lifecycle.resetting``): the state, status and batch record, and our cordon hold (a human's
  cordon stays). Refused on a node where a package pod of the CR is still running.
- ``ignore|unignore NODE`` sets or removes ``bridge.nodewright.io/ignore=true``: rollouts do not
  pick an ignored node (work in flight there finishes).
"""

from __future__ import annotations

import contextlib
from typing import Any

import click

from lifecycle import pod_records, rerunning, resetting
from lifecycle.nodestate import (
    CORDON_ANNOTATION,
    IGNORE_LABEL,
    batch_annotation,
    drift_label,
    preflight_annotation,
    state_annotation,
    status_key,
)
from lifecycle.spec import NodeWright
from nodewright_bridge.commands.changing import (
    change_node,
    change_options,
    confirmed,
    get_cr,
    get_node,
    meta,
    namespace_option,
    reported,
    say,
)
from nodewright_bridge.commands.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    CommandError,
    JsonObject,
    connect,
    list_all,
)
from nodewright_bridge.controller import podspec, snapshot
from nodewright_bridge.errors import NotFoundError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.rest import Rest

LIVE_PHASES = ("Pending", "Running", "Unknown")


def parsed_cr(rest: Rest, name: str) -> NodeWright:
    parsed = snapshot.parse_nodewright(get_cr(rest, name))
    if not isinstance(parsed, NodeWright):
        raise CommandError(
            f"NodeWright {name!r} is invalid: {'; '.join(parsed.problems)}", EXIT_BAD_INPUT
        )
    return parsed


def _package_pods(rest: Rest, namespace: str, cr: str, node: str) -> list[JsonObject]:
    return list_all(
        rest,
        resources.PODS,
        namespace=namespace,
        label_selector=f"{podspec.LABEL_CR}={cr}",
        field_selector=f"spec.nodeName={node}",
    )


def _live(pod: JsonObject) -> bool:
    return str((pod.get("status") or {}).get("phase") or "Pending") in LIVE_PHASES


def live_pods(pods: list[JsonObject]) -> list[str]:
    """Names of the pods (the CR's on a node) that are still running (or about to)."""
    return sorted(str(meta(p).get("name")) for p in pods if _live(p))


def carrying_pods(pods: list[JsonObject]) -> list[str]:
    """The ended pods (the CR's on a node) that carry a start (``lifecycle.pod_records``): once
    the node's state is forgotten, such a pod kept for its log would bring its entry back."""
    return sorted(
        str(meta(p).get("name"))
        for p in pods
        if not _live(p) and pod_records.ENTRY_ANNOTATION in (meta(p).get("annotations") or {})
    )


# ---- rerun -----------------------------------------------------------------------------------


@click.command(name="rerun")
@click.argument("name")
@click.option("--node", "node_name", required=True, help="The node to run the package(s) on.")
@click.option("--package", default="", help="Only this package (default: every package).")
@change_options(confirm=True)
def rerun(  # noqa: PLR0917 - click passes options positionally
    name: str,
    node_name: str,
    package: str,
    dry_run: bool,
    yes: bool,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Run a package again on a node, through the rollout (cordon, drain, interrupt as its
    cycle needs)."""
    with reported():
        rest = connect(kubeconfig, kube_context)
        cr = parsed_cr(rest, name)
        key = state_annotation(name)
        what = package or "every package"
        confirmed(
            f"Run {what} of nodewright/{name} again on {node_name}? A package with an interrupt "
            "cordons, drains and interrupts the node again.",
            yes=yes,
            dry_run=dry_run,
        )
        outcome: dict[str, rerunning.Rerun] = {}

        def decide(node: JsonObject) -> JsonObject | None:
            state = _state(node, name)
            marked = rerunning.mark_rerun(state, cr.spec.packages, package)
            outcome["rerun"] = marked
            if not marked.marked or dry_run:
                return None
            return {"metadata": {"annotations": {key: snapshot.dump_state(marked.state)}}}

        change_node(rest, node_name, decide)
        result = outcome["rerun"]
        for pkg, why in sorted(result.refused.items()):
            click.echo(f"node/{node_name}: {pkg} not marked: {why}", err=True)
        if not result.marked:
            raise CommandError(f"nothing to rerun on {node_name}", EXIT_FAILED)
        say(
            f"node/{node_name}: nodewright/{name} {', '.join(result.marked)} marked to run "
            f"again ({key}: rerun); it starts when the rollout picks the node "
            f"(nwb status {name})",
            dry_run=dry_run,
        )


def _state(node: JsonObject, cr: str) -> dict[str, Any]:
    text = (meta(node).get("annotations") or {}).get(state_annotation(cr))
    try:
        return snapshot.parse_state(text)
    except ValueError as exc:
        raise CommandError(
            f"node/{meta(node).get('name')}: {state_annotation(cr)} does not parse ({exc}); "
            "fix or remove it by hand",
            EXIT_FAILED,
        ) from None


# ---- reset -----------------------------------------------------------------------------------


def _tracked_nodes(rest: Rest, cr: str) -> list[str]:
    keys = (state_annotation(cr), status_key(cr), batch_annotation(cr))
    out = []
    for node in list_all(rest, resources.NODES):
        annotations = meta(node).get("annotations") or {}
        labels = meta(node).get("labels") or {}
        if any(k in annotations for k in keys) or status_key(cr) in labels:
            out.append(str(meta(node).get("name")))
            continue
        cordon = snapshot.parse_cordon(annotations.get(CORDON_ANNOTATION))
        if cordon is not None and cr in cordon.holders:
            out.append(str(meta(node).get("name")))
    return sorted(out)


def reset_patch(cr: str, node: JsonObject, packages: tuple[str, ...]) -> JsonObject | None:
    """The merge patch that resets ``cr`` on ``node`` (None: nothing to reset)."""
    annotations = meta(node).get("annotations") or {}
    labels = meta(node).get("labels") or {}
    change = resetting.reset_node(
        cr,
        _state(node, cr),
        snapshot.parse_cordon(annotations.get(CORDON_ANNOTATION)),
        packages=packages,
        has_status=status_key(cr) in annotations or status_key(cr) in labels,
    )
    if change.empty and (packages or batch_annotation(cr) not in annotations):
        return None
    notes: dict[str, str | None] = {}
    new_labels: dict[str, str | None] = {}
    if change.removed or state_annotation(cr) in annotations:
        notes[state_annotation(cr)] = (
            snapshot.dump_state(change.state) if change.state is not None else None
        )
    if change.clear_status:
        notes[status_key(cr)] = None
        new_labels[status_key(cr)] = None
    if change.clear_batch and batch_annotation(cr) in annotations:
        notes[batch_annotation(cr)] = None
    if not packages:  # a full reset forgets the check-mode records and the drift label too
        if preflight_annotation(cr) in annotations:
            notes[preflight_annotation(cr)] = None
        if drift_label(cr) in labels:
            new_labels[drift_label(cr)] = None
    patch: JsonObject = {"metadata": {"annotations": notes}}
    if new_labels:
        patch["metadata"]["labels"] = new_labels
    if change.cordon is not None:
        record = change.cordon.record
        notes[CORDON_ANNOTATION] = (
            record.model_dump_json(by_alias=True) if record is not None else None
        )
        if change.cordon.uncordon:
            patch["spec"] = {"unschedulable": False}
    return patch


def _describe(patch: JsonObject) -> str:
    notes = (patch.get("metadata") or {}).get("annotations") or {}
    parts = [f"{k} {'removed' if v is None else 'rewritten'}" for k, v in sorted(notes.items())]
    if (patch.get("spec") or {}).get("unschedulable") is False:
        parts.append("uncordoned")
    elif CORDON_ANNOTATION in notes:
        parts.append("our cordon hold released (the node stays cordoned: someone else holds it)")
    return "; ".join(parts)


@click.command(name="reset")
@click.argument("name")
@click.option("--node", "node_name", default="", help="Only this node (default: every node).")
@click.option(
    "--package", "packages", multiple=True, help="Only these packages' entries (repeatable)."
)
@namespace_option
@change_options(confirm=True)
def reset(  # noqa: PLR0917 - click passes options positionally
    name: str,
    node_name: str,
    packages: tuple[str, ...],
    namespace: str,
    dry_run: bool,
    yes: bool,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Forget the state of a NodeWright on nodes: they start over when the rollout picks them.

    Keeps a cordon someone else holds (a human's, another CR's); refused on a node where a
    package pod of the CR still runs.
    """
    with reported():
        rest = connect(kubeconfig, kube_context)
        nodes = [get_node(rest, node_name)["metadata"]["name"]] if node_name else None
        targets = nodes if nodes is not None else _tracked_nodes(rest, name)
        if not targets:
            click.echo(f"nodewright/{name}: no node carries its state; nothing changed")
            return
        what = f"{', '.join(packages)} of " if packages else ""
        confirmed(
            f"Reset {what}nodewright/{name} on {', '.join(targets)}? The packages run again "
            "there from the start.",
            yes=yes,
            dry_run=dry_run,
        )
        busy = False
        for node in targets:
            pods = _package_pods(rest, namespace, name, node)
            running = live_pods(pods)
            if running:
                busy = True
                click.echo(
                    f"error: node/{node}: not reset: package pods of {name} still run there "
                    f"({', '.join(running)}); wait for them or pause the CR first",
                    err=True,
                )
                continue
            if dry_run:
                patch = reset_patch(name, get_node(rest, node), packages)
            else:
                patch = change_node(rest, node, lambda obj: reset_patch(name, obj, packages))
            if patch is None:
                click.echo(f"node/{node}: nothing of nodewright/{name} to reset")
                continue
            say(f"node/{node}: reset nodewright/{name}: {_describe(patch)}", dry_run=dry_run)
            for pod in carrying_pods(pods):
                if not dry_run:
                    with contextlib.suppress(NotFoundError):
                        rest.delete(resources.PODS, pod, namespace=namespace)
                say(f"node/{node}: deleted kept pod {pod} (it recorded the start)", dry_run=dry_run)
        if busy:
            raise click.exceptions.Exit(EXIT_FAILED)


# ---- ignore ----------------------------------------------------------------------------------


def _label(
    node_name: str, on: bool, *, dry_run: bool, kubeconfig: str | None, kube_context: str | None
) -> None:
    rest = connect(kubeconfig, kube_context)
    node = get_node(rest, node_name)
    current = (meta(node).get("labels") or {}).get(IGNORE_LABEL)
    if (current == "true") == on and (on or current is None):
        state = "ignored" if on else "not ignored"
        click.echo(f"node/{node_name}: {state} already; nothing changed")
        return
    if not dry_run:
        change_node(
            rest,
            node_name,
            lambda _: {"metadata": {"labels": {IGNORE_LABEL: "true" if on else None}}},
        )
    if on:
        say(
            f"node/{node_name}: ignored ({IGNORE_LABEL}=true): rollouts do not pick it",
            dry_run=dry_run,
        )
    else:
        say(f"node/{node_name}: not ignored any more ({IGNORE_LABEL} removed)", dry_run=dry_run)


@click.command(name="ignore")
@click.argument("node_name", metavar="NODE")
@change_options(confirm=False)
def ignore(node_name: str, dry_run: bool, kubeconfig: str | None, kube_context: str | None) -> None:
    """Keep rollouts off a node (work in flight there finishes)."""
    with reported():
        _label(node_name, True, dry_run=dry_run, kubeconfig=kubeconfig, kube_context=kube_context)


@click.command(name="unignore")
@click.argument("node_name", metavar="NODE")
@change_options(confirm=False)
def unignore(
    node_name: str, dry_run: bool, kubeconfig: str | None, kube_context: str | None
) -> None:
    """Let rollouts pick a node again."""
    with reported():
        _label(node_name, False, dry_run=dry_run, kubeconfig=kubeconfig, kube_context=kube_context)
