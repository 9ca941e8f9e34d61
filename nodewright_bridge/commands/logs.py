"""``nwb logs NAME --node N [--package P] [--attempt K] [-f]``: what a package printed on a node.

Where it reads:
1. the package pods of the CR on the node (a failed pod is kept ``--failed-pod-ttl`` after it
   ended, 24 h by default; ``-f`` follows a running one): their log, the agent's one line per
   task (``ok|changed|failed  <stage>  <task>``), read through the API server from the kubelet;
2. for failed attempts whose pod is gone or whose log cannot be read (the sandbox's simulated
   kubelet serves no logs): the last lines the controller kept in the ConfigMap
   ``nwb-logs-<node>`` (``lifecycle.failure_tails``): the failing task, its message and the run's
   last lines, secrets redacted by the agent.
"""

from __future__ import annotations

from typing import Any

import click

from lifecycle import failure_tails
from nodewright_bridge.commands.changing import meta, namespace_option, reported
from nodewright_bridge.commands.common import (
    EXIT_FAILED,
    CommandError,
    JsonObject,
    connect,
    kube_options,
    list_all,
)
from nodewright_bridge.controller import podspec
from nodewright_bridge.controller.failure_logs import config_map_name
from nodewright_bridge.errors import ApiError, NotFoundError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.rest import Rest


def _attempt(pod: JsonObject) -> int:
    try:
        return int((meta(pod).get("annotations") or {}).get(podspec.ANNOTATION_ATTEMPT, "0"))
    except ValueError:
        return 0


def _pods(rest: Rest, namespace: str, cr: str, node: str, package: str) -> list[JsonObject]:
    selector = f"{podspec.LABEL_CR}={cr}"
    if package:
        selector += f",{podspec.LABEL_PACKAGE}={package}"
    pods = list_all(
        rest,
        resources.PODS,
        namespace=namespace,
        label_selector=selector,
        field_selector=f"spec.nodeName={node}",
    )
    return sorted(pods, key=lambda p: str(meta(p).get("creationTimestamp", "")))


def _read_log(rest: Rest, namespace: str, pod: str, *, follow: bool) -> Any:
    """The pod's log (text, or with ``follow`` a stream); None when it cannot be read."""
    path = resources.PODS.path(namespace=namespace, name=pod, subresource="log")
    query = [("container", "agent")]
    try:
        if follow:
            return rest.stream(
                path, query=[*query, ("follow", "true")], read_timeout=None, accept="*/*"
            )
        return rest.read_text(path, query=query)
    except ApiError:
        return None


def _tails(rest: Rest, namespace: str, cr: str, node: str, package: str) -> list[Any]:
    try:
        cm = rest.get(resources.CONFIG_MAPS, config_map_name(node), namespace=namespace)
    except NotFoundError:
        return []
    return failure_tails.tails_of(cm.get("data") or {}, cr, package)


def _print_tail(tail: failure_tails.FailureTail) -> None:
    where = f"pod {tail.pod}, gone" if tail.pod else "no pod"
    click.echo(
        f"── {tail.package} {tail.version} {tail.stage} attempt {tail.attempt}: failed at "
        f"{tail.time} ({where}; last lines kept by the controller)"
    )
    if tail.task:
        click.echo(f"failed task: {tail.task}")
    if tail.message:
        click.echo(f"message: {tail.message}")
    for line in tail.lines:
        click.echo(line)


def _follow(rest: Rest, namespace: str, pods: list[JsonObject]) -> bool:
    running = [p for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
    if not running:
        return False
    name = str(meta(running[-1]).get("name"))
    stream = _read_log(rest, namespace, name, follow=True)
    if stream is None:
        raise CommandError(
            f"cannot read the log of pod {name} (does the kubelet serve logs?); run "
            "nwb logs again without -f when it ended for the kept lines",
            EXIT_FAILED,
        )
    click.echo(f"── following pod {name}")
    try:
        for chunk in stream.chunks():
            click.echo(chunk.decode("utf-8", "replace"), nl=False)
    finally:
        stream.close()
    return True


@click.command(name="logs")
@click.argument("name")
@click.option("--node", "node_name", required=True, help="The node the package ran on.")
@click.option("--package", default="", help="Only this package.")
@click.option("--attempt", type=int, default=None, help="Only this attempt number.")
@click.option("-f", "--follow", is_flag=True, help="Follow the running package pod's log.")
@namespace_option
@kube_options()
def command(  # noqa: PLR0917 - click passes options positionally
    name: str,
    node_name: str,
    package: str,
    attempt: int | None,
    follow: bool,
    namespace: str,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """What a NodeWright's packages printed on a node: kept failed pods, then the last lines
    the controller kept of failed attempts whose pod is gone."""
    with reported():
        rest = connect(kubeconfig, kube_context)
        pods = [
            p
            for p in _pods(rest, namespace, name, node_name, package)
            if attempt is None or _attempt(p) == attempt
        ]
        if follow and _follow(rest, namespace, pods):
            return
        shown: set[str] = set()
        for pod in pods:
            pod_name = str(meta(pod).get("name"))
            text = _read_log(rest, namespace, pod_name, follow=False)
            if text is None:
                continue
            phase = (pod.get("status") or {}).get("phase", "")
            click.echo(f"── pod {pod_name} (attempt {_attempt(pod)}, {phase})")
            click.echo(str(text), nl=not str(text).endswith("\n"))
            shown.add(pod_name)
        tails = [
            t
            for t in _tails(rest, namespace, name, node_name, package)
            if t.pod not in shown and (attempt is None or t.attempt == attempt)
        ]
        for tail in tails:
            _print_tail(tail)
        if not shown and not tails:
            raise CommandError(
                f"no log of nodewright/{name} on {node_name}"
                + (f" for {package}" if package else "")
                + (f" attempt {attempt}" if attempt is not None else "")
                + ": no package pod is there and no failed attempt was kept",
                EXIT_FAILED,
            )
