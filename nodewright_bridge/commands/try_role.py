"""``nwb try ROLE_DIR``: a first rollout of your own role on sandbox nodes, in one command.

What it does, reusing the demo's machinery (``commands.demo``) in its own state directory
(``<cache>/try`` by default), so that a second run is quick:

1. ``nwb package init`` on a copy of the role (the role directory is not written to, unless
   ``--write-manifest``) and the image layout assembled for the exec-mode kubelet;
2. a sandbox with ``--nodes`` exec-mode nodes (reused when it runs with that many nodes and
   serves the package; otherwise restarted);
3. the CRDs, the ``nodewright-system`` namespace and a NodeWright ``try-<package>`` that targets
   the sandbox's nodes one at a time (``interruptionBudget.count: 1``), with ``--vars`` as the
   package vars and ``--interrupt`` as its interrupt;
4. ``nwb controller`` in the background (reused if it runs against this sandbox);
5. the rollout followed live until done, then the per-node summary and where the logs are: the
   controller's log, and each node's Ansible logs under its root filesystem.

A changed role is re-assembled, but nodes that completed the same version keep it: pass a new
``--version`` to roll it again (a changed ``--vars`` file rolls by itself, as a config change).
Exit code: 0 when the rollout completes, 1 when it does not, 2 on bad input.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console

from nodewright_bridge.commands import common, demo
from nodewright_bridge.commands import status as status_cmd
from nodewright_bridge.errors import ApiError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.rest import PatchType, Rest
from playbook_adapter.errors import PackageError

REPOSITORY = "localhost:5000/nwb-try"  # resolved by the kubelet's image map, never pulled
NODE_PREFIX = "try-"
FLEET_LABEL = {"try.nodewright.io/fleet": "try"}
FALLBACK_VERSION = "1.0.0"
CR_NAME_MAX = 50
INTERRUPTS = ("reboot", "service", "restartAllServices", "noop")


class TryError(Exception):
    """Bad input or a step that failed; the message says what to do."""


def state_dir_default() -> Path:
    from nodewright_bridge.sandbox import binaries  # noqa: PLC0415 - keep --help fast

    return binaries.cache_root() / "try"


def cr_name(package: str) -> str:
    return f"try-{package}"[:CR_NAME_MAX].rstrip("-")


def parse_interrupt(text: str | None) -> dict[str, Any] | None:
    """``reboot`` | ``noop`` | ``restartAllServices`` | ``service:UNIT[,UNIT]`` -> the CR's
    ``interrupt``; None: the role decides (its manifest and what its handlers ask for)."""
    if not text:
        return None
    kind, _, services = text.partition(":")
    if kind not in INTERRUPTS:
        raise TryError(
            f"--interrupt: expected reboot, noop, restartAllServices or service:UNIT[,UNIT], "
            f"got {text!r}"
        )
    units = [s for s in services.split(",") if s]
    if kind == "service" and not units:
        raise TryError("--interrupt service needs the units to restart: service:UNIT[,UNIT]")
    return {"type": kind, **({"services": units} if units else {})}


def read_vars(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise TryError(f"--vars {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TryError(f"--vars {path}: expected a mapping of variable names to values")
    return {str(k): v for k, v in data.items()}


def rollout_object(
    package: str,
    version: str,
    *,
    variables: dict[str, Any],
    interrupt: dict[str, Any] | None,
) -> dict[str, Any]:
    """The NodeWright that rolls ``package`` onto the sandbox's nodes, one at a time."""
    spec_package: dict[str, Any] = {"version": version, "image": f"{REPOSITORY}/{package}"}
    if variables:
        spec_package["vars"] = variables
    if interrupt is not None:
        spec_package["interrupt"] = interrupt
    return {
        "apiVersion": f"{resources.NODEWRIGHTS.group}/{resources.NODEWRIGHTS.version}",
        "kind": "NodeWright",
        "metadata": {"name": cr_name(package)},
        "spec": {
            "nodeSelectors": {"matchLabels": dict(FLEET_LABEL)},
            "interruptionBudget": {"count": 1},
            # The sandbox isolates each pod in its own PID namespace: chroot reaches the node root.
            "hostConnection": "chroot",
            "packages": {package: spec_package},
        },
    }


def apply_rollout(rest: Rest, body: dict[str, Any]) -> str:
    """Create the CR or bring its spec to ``body`` (packages no longer tried are removed)."""
    name = body["metadata"]["name"]
    try:
        current = rest.get(resources.NODEWRIGHTS, name)
    except ApiError:
        current = None
    if current is not None:
        spec = dict(body["spec"])
        packages = dict(spec["packages"])
        old = ((current.get("spec") or {}).get("packages") or {}).keys()
        packages.update({k: None for k in old if k not in packages})
        # vars and interrupt are replaced, not merged: a key dropped from --vars is dropped.
        for pkg in spec["packages"].values():
            pkg.setdefault("vars", None)
            pkg.setdefault("interrupt", None)
        spec["packages"] = packages
        before = current["metadata"].get("generation")
        after = rest.patch(resources.NODEWRIGHTS, name, {"spec": spec}, patch_type=PatchType.MERGE)
        return "unchanged" if after["metadata"].get("generation") == before else "updated"
    return demo.apply_object(rest, resources.NODEWRIGHTS, body)


def log_hints(
    sandbox_dir: Path, nodes: list[str], cr: str, package: str, version: str
) -> list[str]:
    """Where each node keeps the JSONL logs of its Ansible runs (under its own root)."""
    relative = Path("var/log/nodewright") / cr / package / version
    return [
        str(sandbox_dir / "kubelet" / "nodes" / node / "rootfs" / "root" / relative)
        for node in nodes
    ]


def run_try(
    role_dir: Path,
    state: Path,
    *,
    variables_file: Path | None,
    nodes: int,
    interrupt: str | None,
    version: str | None,
    write_manifest: bool,
    live: bool,
    timeout: float,
    console: Console,
) -> int:
    from nodewright_bridge.sandbox import rootfs  # noqa: PLC0415

    started = time.monotonic()
    variables = read_vars(variables_file)
    chosen_interrupt = parse_interrupt(interrupt)
    state.mkdir(parents=True, exist_ok=True)
    steps = demo.Steps(console, live)
    with steps.spinner("node base rootfs") as say:
        base = rootfs.ensure_base_rootfs(say)
    steps.step(f"node base rootfs ready ({base})")

    manifest, package_dir = demo.prepare_package(
        role_dir, state, version=version, fallback_version=FALLBACK_VERSION
    )
    package, pkg_version = manifest.name, manifest.version
    if write_manifest:
        from playbook_adapter import introspection  # noqa: PLC0415

        written = introspection.write_manifest(role_dir, manifest)
        steps.note(f"wrote {written}")
    declared = manifest.interrupt.type.value if manifest.interrupt else "the role decides"
    steps.step(f"package {package} {pkg_version} (nwb package init; interrupt: {declared})")
    steps.note(f"image layout in {package_dir}")

    image_map = {f"{REPOSITORY}/{package}": package_dir}
    with steps.spinner("sandbox") as say:
        sandbox, reused = demo.ensure_sandbox(
            state / "sandbox",
            nodes=nodes,
            mode="exec",
            image_map=image_map,
            say=say,
            labels=FLEET_LABEL,
            node_prefix=NODE_PREFIX,
            replace=True,
        )
    kubeconfig = str(sandbox["kubeconfig"])
    node_names = sorted(sandbox.get("nodes") or [])
    rest = common.connect(kubeconfig, None)
    steps.step(
        ("sandbox reused" if reused else "sandbox started")
        + f": apiserver {sandbox['server']}, nodes {', '.join(node_names)}"
    )
    steps.note(f"export KUBECONFIG={kubeconfig}")

    demo.ensure_crds(rest)
    demo.ensure_namespace(rest, demo.CONTROLLER_NAMESPACE)
    body = rollout_object(package, pkg_version, variables=variables, interrupt=chosen_interrupt)
    name = body["metadata"]["name"]
    result = apply_rollout(rest, body)
    steps.step(
        f"CRDs and namespace {demo.CONTROLLER_NAMESPACE} applied; NodeWright {name} {result}"
    )

    record, controller_reused = demo.ensure_controller(state, kubeconfig, rest)
    steps.step(
        f"controller {'reused' if controller_reused else 'started'} (pid {record['pid']}, "
        f"log {record['log']})"
    )

    def controller_gone() -> str | None:
        if demo.pid_alive(int(record["pid"])):
            return None
        return f"the controller stopped; see {record['log']}"

    steps.step(f"rollout of NodeWright {name} (nwb status {name} --watch):")
    code = status_cmd.watch(
        rest,
        name,
        output="table",
        live=live,
        interval=1.0,
        timeout=timeout,
        max_nodes=40,
        console=console,
        on_tick=controller_gone,
    )
    console.print(f"finished in {time.monotonic() - started:.0f}s. Logs:", highlight=False)
    console.print(f"  controller: {record['log']}", highlight=False, soft_wrap=True)
    hints = log_hints(state / "sandbox", node_names, name, package, pkg_version)
    for node, where in zip(node_names, hints, strict=True):
        console.print(f"  {node} Ansible runs (JSONL): {where}", highlight=False, soft_wrap=True)
    console.print("Next:", highlight=False)
    for hint in (
        f"export KUBECONFIG={kubeconfig}",
        f"nwb status {name}",
        f"kubectl get node -o yaml  # bridge.nodewright.io/state-{name} per node",
        f"nwb try --down{'' if state == state_dir_default() else f' --state-dir {state}'}",
    ):
        console.print(f"  {hint}", highlight=False, soft_wrap=True)
    return code


@click.command(name="try")
@click.argument(
    "role_dir",
    required=False,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option(
    "--vars",
    "variables_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML file of the role's variables (the package's vars).",
)
@click.option(
    "--nodes", type=click.IntRange(1, 20), default=2, show_default=True, help="Sandbox nodes."
)
@click.option(
    "--interrupt",
    help="reboot, noop, restartAllServices or service:UNIT[,UNIT] (default: the role decides).",
)
@click.option("--version", help="Package version (default: from the role, else 1.0.0).")
@click.option(
    "--write-manifest",
    is_flag=True,
    help="Also write nodewright-package.yaml into ROLE_DIR (as `nwb package init` does).",
)
@click.option("--down", "stop", is_flag=True, help="Stop this command's controller and sandbox.")
@click.option(
    "--live/--no-live",
    default=None,
    help="Refreshing display (default on a terminal) or one progress line per change.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=10),
    default=demo.DEFAULT_TIMEOUT_SECONDS,
    show_default=True,
    help="Seconds to wait for the rollout.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where it keeps its sandbox, package and logs (default: <cache>/try).",
)
def command(  # noqa: PLR0917 - click passes options positionally
    role_dir: Path | None,
    variables_file: Path | None,
    nodes: int,
    interrupt: str | None,
    version: str | None,
    write_manifest: bool,
    stop: bool,
    live: bool | None,
    timeout: float,
    state_dir: Path | None,
) -> None:
    """Roll your own role onto sandbox nodes: package, sandbox, CRDs, controller, live status."""
    console = status_cmd.wide_console()
    state = state_dir or state_dir_default()
    if stop:
        demo.down(state, console, what="try")
        return
    if role_dir is None:
        console.print("error: ROLE_DIR is required (or --down)", style="red", highlight=False)
        raise click.exceptions.Exit(2)
    try:
        code = run_try(
            role_dir,
            state,
            variables_file=variables_file,
            nodes=nodes,
            interrupt=interrupt,
            version=version,
            write_manifest=write_manifest,
            live=live if live is not None else console.is_terminal,
            timeout=timeout,
            console=console,
        )
    except TryError as exc:
        console.print(f"error: {exc}", style="red", highlight=False, markup=False)
        raise click.exceptions.Exit(2) from None
    except PackageError as exc:
        for problem in exc.problems:
            console.print(f"error: {problem}", style="red", highlight=False, markup=False)
        raise click.exceptions.Exit(2) from None
    except (demo.DemoError, common.CommandError) as exc:
        console.print(f"try failed: {exc}", style="red", highlight=False, markup=False)
        raise click.exceptions.Exit(1) from None
    except ApiError as exc:
        message = f"try failed: the API server refused: {exc}"
        console.print(message, style="red", highlight=False, markup=False)
        raise click.exceptions.Exit(1) from None
    raise click.exceptions.Exit(code)
