"""``nwb sandbox up|down|status|env``: a control plane on loopback with simulated nodes.

``up`` starts a detached supervisor (it keeps running after the command returns) and shows its
progress - the first run builds the control plane from Go modules, which takes a while.
``env`` prints ``export KUBECONFIG=...`` for ``eval "$(nwb sandbox env)"``.
"""

from __future__ import annotations

import json
import ssl
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from nodewright_bridge.sandbox import supervisor

MODES = ("simulate", "exec", "podman", "kubelet")  # kubelet: real nodes, 1 to 3
# Real nodes cost a containerd and a kubelet each; more than this does not fit 2 cores.
KUBELET_MAX_NODES = 3
# Cold: the Go build (20-40 min on 2 cores) plus start-up; warm: seconds.
UP_TIMEOUT_SECONDS = 3600.0


def _state_dir(value: Path | None) -> Path:
    if value is not None:
        return value
    from nodewright_bridge.sandbox import default_state_dir  # noqa: PLC0415 - lazy, heavy import

    return default_state_dir()


def parse_labels(text: str) -> tuple[dict[str, str], list[str]]:
    """``k=v,k2=v2`` -> labels, plus one message per malformed entry."""
    labels: dict[str, str] = {}
    problems: list[str] = []
    for index, item in enumerate(part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            problems.append(f"--labels[{index}]: expected key=value, got {item!r}")
            continue
        labels[key] = value
    return labels, problems


state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Sandbox state directory (default: ~/.cache/nodewright-bridge/sandbox).",
)


@click.group(name="sandbox")
def command() -> None:
    """A real control plane on loopback with simulated nodes."""


@command.command(name="up")
@click.option("--nodes", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--labels", default="", help="Labels for every node: k=v,k2=v2.")
@click.option("--mode", type=click.Choice(MODES), default="simulate", show_default=True)
@click.option("--registry", is_flag=True, help="Also run a local image registry.")
@click.option("--node-prefix", default="node-", show_default=True)
@click.option(
    "--image-map",
    multiple=True,
    metavar="REPO=DIR",
    help="exec mode: run image repository REPO from local package directory DIR (repeatable).",
)
@state_dir_option
def up(  # noqa: PLR0917 - click passes options positionally
    nodes: int,
    labels: str,
    mode: str,
    registry: bool,
    node_prefix: str,
    image_map: tuple[str, ...],
    state_dir: Path | None,
) -> None:
    """Start a sandbox in the background and wait until it is ready."""
    parsed, problems = parse_labels(labels)
    images: dict[str, str] = {}
    for index, item in enumerate(image_map):
        repo, sep, package_dir = item.partition("=")
        if not sep or not repo or not Path(package_dir).is_dir():
            problems.append(f"--image-map[{index}]: expected REPO=existing-dir, got {item!r}")
            continue
        images[repo] = str(Path(package_dir).resolve())
    if mode == "kubelet" and not 1 <= nodes <= KUBELET_MAX_NODES:
        problems.append(
            f"--nodes: the kubelet tier runs 1 to {KUBELET_MAX_NODES} nodes, got {nodes}"
        )
    if problems:
        for problem in problems:
            click.echo(problem, err=True)
        sys.exit(2)
    directory = _state_dir(state_dir)
    existing = supervisor.running_state(directory)
    if existing is not None:
        click.echo(f"a sandbox is already running (pid {existing['pid']}) in {directory}", err=True)
        click.echo(f"export KUBECONFIG={existing.get('kubeconfig', '')}")
        sys.exit(1)
    request = supervisor.Request(
        nodes=nodes,
        labels=parsed,
        mode=mode,
        registry=registry,
        node_prefix=node_prefix,
        image_map=images,
    )
    proc = supervisor.spawn(directory, request)
    console = Console(stderr=True)
    deadline = time.monotonic() + UP_TIMEOUT_SECONDS
    state: dict[str, Any] | None = None
    with console.status("starting sandbox") as status:
        while time.monotonic() < deadline:
            state = supervisor.read_state(directory)
            if state is not None:
                status.update(str(state.get("message") or state.get("phase")))
                if state.get("phase") in ("ready", "failed"):
                    break
            if proc.poll() is not None:
                break
            time.sleep(0.3)
    if state is None or state.get("phase") != "ready":
        message = (state or {}).get("message") or f"supervisor exited ({proc.poll()})"
        console.print(f"[red]sandbox failed to start:[/red] {message}")
        console.print(f"log: {directory / supervisor.LOG_FILE}")
        supervisor.stop(directory)
        sys.exit(1)
    console.print(
        f"[green]sandbox ready[/green]: {len(state.get('nodes', []))} {mode}-mode nodes, "
        f"apiserver {state['server']}"
        + (f", registry {state['registry']}" if state.get("registry") else "")
    )
    click.echo(f"export KUBECONFIG={state['kubeconfig']}")


@command.command(name="down")
@state_dir_option
def down(state_dir: Path | None) -> None:
    """Stop the sandbox (control plane, kubelet, registry)."""
    directory = _state_dir(state_dir)
    if supervisor.stop(directory):
        click.echo("sandbox stopped")
    else:
        click.echo("no sandbox running")


def _probe(state: dict[str, Any]) -> tuple[bool, int, int]:
    """(apiserver ready, nodes, ready nodes) using the admin kubeconfig's CA."""
    ca = Path(state["stateDir"]) / "controlplane" / "pki" / "ca.crt"
    context = ssl.create_default_context(cafile=str(ca))
    pki = ca.parent
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    server = state["server"]
    try:
        with urllib.request.urlopen(f"{server}/readyz", timeout=5, context=context) as resp:
            ready = resp.status == 200
        with urllib.request.urlopen(f"{server}/api/v1/nodes", timeout=30, context=context) as resp:
            items = json.load(resp).get("items") or []
    except OSError:
        return False, 0, 0
    ready_nodes = sum(
        1
        for node in items
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in node.get("status", {}).get("conditions") or []
        )
    )
    return ready, len(items), ready_nodes


@command.command(name="status")
@state_dir_option
def status(state_dir: Path | None) -> None:
    """Show whether a sandbox runs, its apiserver and how many nodes are Ready."""
    directory = _state_dir(state_dir)
    state = supervisor.running_state(directory)
    if state is None:
        click.echo("no sandbox running")
        sys.exit(1)
    click.echo(f"phase: {state['phase']} (supervisor pid {state['pid']})")
    if state["phase"] != "ready":
        click.echo(f"message: {state.get('message', '')}")
        sys.exit(1)
    ready, count, ready_nodes = _probe(state)
    click.echo(f"apiserver: {state['server']} ({'ready' if ready else 'NOT ready'})")
    click.echo(f"nodes: {ready_nodes}/{count} Ready, mode {state['request']['mode']}")
    if state.get("registry"):
        click.echo(f"registry: {state['registry']}")
    click.echo(f"kubeconfig: {state['kubeconfig']}")
    click.echo(f"logs: {state.get('logs', '')}")
    if not ready:
        sys.exit(1)


@command.command(name="env")
@state_dir_option
def env(state_dir: Path | None) -> None:
    """Print shell exports for the running sandbox: eval "$(nwb sandbox env)"."""
    directory = _state_dir(state_dir)
    state = supervisor.running_state(directory)
    if state is None or state.get("phase") != "ready":
        click.echo("no sandbox running (start one with: nwb sandbox up)", err=True)
        sys.exit(1)
    click.echo(f"export KUBECONFIG={state['kubeconfig']}")
    if state.get("registry"):
        click.echo(f"export NWB_REGISTRY={state['registry']}")
