"""``nwb demo`` (``make demo``): a real rollout on the sandbox, start to finish, in a few minutes.

Steps, each reusing what a previous run left (so running it again is quick):

1. the node base root filesystem (debootstrap, cached) every simulated node gets a copy of;
2. the example roles ``sysctl-tuning`` and ``kmod-blacklist`` as packages: ``nwb package init``
   (the manifest, by convention) on a copy of each role, then the image layout assembled into a
   directory the exec-mode kubelet runs as that image (``--images`` also builds real OCI images
   with podman and pushes them to the sandbox's registry, and runs the nodes in podman mode);
3. the sandbox (``nwb sandbox up`` machinery, its own state directory): the control plane
   (built from Go modules on the very first run, with progress) and six exec-mode nodes, three
   labelled ``gpu=a100`` and three ``gpu=h100``; an already running demo sandbox is reused;
4. the CRDs from ``charts/nodewright-bridge/crds``, the controller namespace, the DeploymentPolicy
   ``demo-canary`` and the NodeWright ``demo-tuning`` from ``examples/demo/``;
5. ``nwb controller`` as a background process logging to ``<state>/controller.log``;
6. ``nwb status demo-tuning --watch`` until the rollout is done, then a per-node summary.

The sandbox and the controller keep running afterwards (try ``nwb status``, ``nwb plan --live``,
``kubectl get nw``); ``nwb demo --down`` stops both. Exit code: 0 when the rollout completes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from nodewright_bridge.commands import common
from nodewright_bridge.commands import status as status_cmd
from nodewright_bridge.errors import AlreadyExistsError, ApiError, NotFoundError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.rest import PatchType, Rest
from nodewright_bridge.runtime.leadership import LEASE_NAME
from playbook_adapter.errors import PackageError
from playbook_adapter.manifest import PackageManifest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DEMO_FILES = EXAMPLES / "demo"
CRD_DIR = ROOT / "charts" / "nodewright-bridge" / "crds"
PACKAGES = ("sysctl-tuning", "kmod-blacklist")
PACKAGE_VERSION = "1.0.0"
EXEC_REPOSITORY = "localhost:5000/nodewright"  # resolved by the kubelet's image map, never pulled
NODE_PREFIX = "gpu-"
FLEET_LABEL = {"demo.nodewright.io/fleet": "gpu"}
GROUPS = ("a100", "h100")
CONTROLLER_NAMESPACE = "nodewright-system"
CRDS = resources.Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
NAMESPACES = resources.NAMESPACES
SANDBOX_START_SECONDS = 3600.0  # cold: the control-plane build (20-40 min on 2 cores)
ESTABLISH_SECONDS = 60.0
CONTROLLER_START_SECONDS = 10.0
DEFAULT_TIMEOUT_SECONDS = 900.0
# Lines of long-running tools that say nothing a user acts on (debootstrap: I: info, W: warning).
CHATTER_PREFIXES = ("I: ", "W: ")
SPINNER_WIDTH = 100


class DemoError(Exception):
    """A step failed; the message says which and where to look."""


def state_dir_default() -> Path:
    from nodewright_bridge.sandbox import binaries  # noqa: PLC0415 - keep --help fast

    return binaries.cache_root() / "demo"


@dataclass
class Steps:
    """Numbered progress lines (and a spinner for long steps on a terminal)."""

    console: Console
    live: bool
    total: int = 6
    done: int = 0

    def step(self, text: str) -> None:
        self.done += 1
        line = f"[bold][{self.done}/{self.total}][/bold] {text}"
        self.console.print(line, highlight=False, soft_wrap=True)  # paths stay copyable

    def note(self, text: str) -> None:
        self.console.print(f"      {text}", highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def spinner(self, text: str) -> Iterator[Callable[[str], None]]:
        """A long step: on a terminal a transient spinner with the elapsed time and the latest
        message; otherwise one line per headline message. The tool's own chatter (debootstrap's
        ``I: Configuring ...``, one line per package) is never printed, only counted."""
        if self.live:
            columns = (
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
            )
            with Progress(*columns, console=self.console, transient=True) as progress:
                task = progress.add_task(text, total=None)

                def update(message: str) -> None:
                    shown = message if len(message) <= SPINNER_WIDTH else message[:SPINNER_WIDTH]
                    progress.update(task, description=f"{text}: {shown}")

                yield update
            return
        last = [""]

        def say(message: str) -> None:
            if message != last[0] and headline(message):
                last[0] = message
                self.console.print(f"      {text}: {message}", highlight=False)

        yield say


def headline(message: str) -> bool:
    """A progress message worth a line of its own: not a tool's per-item chatter (debootstrap
    prefixes each of its ~100 steps with ``I:``, warnings with ``W:``)."""
    return not message.startswith(CHATTER_PREFIXES)


# ---- 1-2: rootfs and packages ---------------------------------------------------------------


def _tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(item.relative_to(path)).encode())
        digest.update(item.read_bytes())
    return digest.hexdigest()[:16]


def prepare_packages(state: Path) -> dict[str, Path]:
    """``nwb package init`` on a copy of each example role, then the image layout assembled.

    Returns image repository -> package directory (the exec-mode image map). Unchanged roles are
    not re-assembled, so a running sandbox keeps serving the same directories.
    """
    out: dict[str, Path] = {}
    for name in PACKAGES:
        _, package = prepare_package(EXAMPLES / "roles" / name, state, version=PACKAGE_VERSION)
        out[f"{EXEC_REPOSITORY}/{name}"] = package
    return out


def prepare_package(
    source: Path,
    state: Path,
    *,
    version: str | None = None,
    fallback_version: str | None = None,
) -> tuple[PackageManifest, Path]:
    """``nwb package init`` on a copy of the role ``source`` (the source is never written),
    then the image layout assembled into ``<state>/packages/<package name>``.

    Returns the manifest and the package directory. An unchanged role (same files, same version)
    is not re-assembled, so a running sandbox keeps serving the same directory.
    """
    from playbook_adapter import imaging, introspection  # noqa: PLC0415 - heavy imports

    manifest = introspection.introspect_role(
        source, version=version, fallback_version=fallback_version
    )
    name = manifest.name
    role = state / "roles" / name
    package = state / "packages" / name
    stamp = state / "packages" / f"{name}.digest"
    digest = f"{_tree_digest(source)}-{manifest.version}"
    if package.is_dir() and stamp.is_file() and stamp.read_text() == digest:
        return manifest, package
    package.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(role, ignore_errors=True)
    shutil.copytree(source, role, ignore=shutil.ignore_patterns(".git"))
    manifest = introspection.introspect_role(role, version=manifest.version, name=name)
    introspection.write_manifest(role, manifest)  # what `nwb package init` writes
    fresh = package.with_name(f"{name}.new")
    shutil.rmtree(fresh, ignore_errors=True)
    imaging.assemble_package(role, manifest, fresh)
    if package.exists():
        old = package.with_name(f"{name}.old")
        shutil.rmtree(old, ignore_errors=True)
        package.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    fresh.rename(package)
    stamp.write_text(digest)
    return manifest, package


def build_images(
    state: Path, registry: str, base_rootfs: Path, say: Callable[[str], None]
) -> dict[str, str]:
    """``nwb package build --push`` for each role copy: package -> pushed image repository.

    The base image is the node rootfs imported into the engine (no public registry needed).
    """
    from playbook_adapter import imaging  # noqa: PLC0415 - needs a container engine

    engine = imaging.detect_engine(None)
    base_image = f"localhost/nwb-base:{base_rootfs.name}"
    say(f"base image {base_image} from the node rootfs")
    imaging.ensure_rootfs_image(engine, base_rootfs, base_image)
    out: dict[str, str] = {}
    for name in PACKAGES:
        repository = f"{registry}/nodewright/{name}"
        say(f"building {repository}:{PACKAGE_VERSION} with {engine.name}")
        result = imaging.build_package(
            state / "roles" / name,
            engine=engine,
            tag=f"{repository}:{PACKAGE_VERSION}",
            base_image=base_image,
            now=datetime.now(tz=UTC),
        )
        say(f"pushing {result.image}")
        imaging.push_image(engine, result.image, tls_verify=False)
        out[name] = repository
    return out


# ---- 3: sandbox ----------------------------------------------------------------------------


def node_labels(index: int, per_group: int) -> dict[str, str]:
    return {**FLEET_LABEL, "gpu": GROUPS[min(index // per_group, len(GROUPS) - 1)]}


def ensure_sandbox(
    sandbox_dir: Path,
    *,
    nodes: int,
    mode: str,
    image_map: Mapping[str, Path],
    say: Callable[[str], None],
    labels: Mapping[str, str] = FLEET_LABEL,
    node_prefix: str = NODE_PREFIX,
    replace: bool = False,
) -> tuple[dict[str, Any], bool]:
    """The running sandbox in ``sandbox_dir`` (reused when it matches), or a new one. Returns
    (state, reused). One that does not match (node count, mode, or an image it cannot serve) is
    an error, or with ``replace`` stopped and started anew."""
    from nodewright_bridge.sandbox import supervisor  # noqa: PLC0415

    current = supervisor.running_state(sandbox_dir)
    if current is not None and current.get("phase") == "ready":
        request = current.get("request") or {}
        served = request.get("image_map") or {}
        wanted = {repo: str(path) for repo, path in image_map.items()}
        if (
            request.get("mode") == mode
            and request.get("nodes") == nodes
            and all(served.get(repo) == path for repo, path in wanted.items())
        ):
            return current, True
        if not replace:
            raise DemoError(
                f"a demo sandbox with {request.get('nodes')} {request.get('mode')}-mode nodes "
                f"is running in {sandbox_dir}; stop it first with: nwb demo --down"
            )
        say("the running sandbox does not match; restarting it")
        supervisor.stop(sandbox_dir)
        current = None
    if current is None:
        request_obj = supervisor.Request(
            nodes=nodes,
            labels=dict(labels),
            mode=mode,
            registry=mode == "podman",
            node_prefix=node_prefix,
            image_map={repo: str(path) for repo, path in image_map.items()},
        )
        supervisor.spawn(sandbox_dir, request_obj)
    deadline = time.monotonic() + SANDBOX_START_SECONDS
    while time.monotonic() < deadline:
        state = supervisor.read_state(sandbox_dir)
        if state is not None:
            say(str(state.get("message") or state.get("phase")))
            if state.get("phase") == "ready":
                return state, False
            if state.get("phase") == "failed":
                break
            if not supervisor.pid_alive(int(state.get("pid", 0))):
                break
        time.sleep(0.3)
    state = supervisor.read_state(sandbox_dir) or {}
    supervisor.stop(sandbox_dir)
    raise DemoError(
        f"the sandbox did not start: {state.get('message') or 'no progress'} "
        f"(log: {sandbox_dir / supervisor.LOG_FILE})"
    )


def label_nodes(rest: Rest, names: list[str], per_group: int) -> None:
    for index, name in enumerate(sorted(names)):
        rest.patch(
            resources.NODES,
            name,
            {"metadata": {"labels": node_labels(index, per_group)}},
            patch_type=PatchType.MERGE,
        )


# ---- 4: API objects -----------------------------------------------------------------------


def ensure_crds(rest: Rest, directory: Path = CRD_DIR) -> None:
    """Create or update every CRD in ``directory`` and wait until each is Established."""
    names = []
    for path in sorted(directory.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            rest.create(CRDS, crd)
        except AlreadyExistsError:
            current = rest.get(CRDS, name)
            crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            rest.replace(CRDS, name, crd)
    deadline = time.monotonic() + ESTABLISH_SECONDS
    for name in names:
        while True:
            conditions = (rest.get(CRDS, name).get("status") or {}).get("conditions") or []
            if any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            ):
                break
            if time.monotonic() > deadline:
                raise DemoError(f"CRD {name} is not Established after {ESTABLISH_SECONDS:.0f}s")
            time.sleep(0.2)


def ensure_namespace(rest: Rest, name: str) -> None:
    with contextlib.suppress(AlreadyExistsError):
        rest.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )


def apply_object(rest: Rest, resource: resources.Resource, body: dict[str, Any]) -> str:
    """Create ``body`` or bring an existing object's spec to it; returns what happened."""
    name = body["metadata"]["name"]
    try:
        rest.create(resource, body)
    except AlreadyExistsError:
        before = rest.get(resource, name)
        after = rest.patch(resource, name, {"spec": body["spec"]}, patch_type=PatchType.MERGE)
        # The server defaults fields, so compare generations rather than specs.
        same = before["metadata"].get("generation") == after["metadata"].get("generation")
        return "unchanged" if same else "updated"
    return "created"


def demo_objects(images: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The policy and the CR from examples/demo, images pointing at this run's packages."""
    policy = yaml.safe_load((DEMO_FILES / "policy.yaml").read_text(encoding="utf-8"))
    cr = yaml.safe_load((DEMO_FILES / "rollout.yaml").read_text(encoding="utf-8"))
    for name, package in cr["spec"]["packages"].items():
        package["image"] = images.get(name, f"{EXEC_REPOSITORY}/{name}")
    return policy, cr


# ---- 5: controller ---------------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    from nodewright_bridge.sandbox import supervisor  # noqa: PLC0415

    return pid > 0 and supervisor.pid_alive(pid)


def controller_record(state: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((state / "controller.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not pid_alive(int(data.get("pid", 0))):
        return None
    return data


def stop_controller(state: Path, timeout: float = 30.0) -> bool:
    record = controller_record(state)
    with contextlib.suppress(OSError):
        (state / "controller.json").unlink()
    if record is None:
        return False
    pid = int(record["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return True


def ensure_controller(state: Path, kubeconfig: str, rest: Rest) -> tuple[dict[str, Any], bool]:
    """The demo's controller for this sandbox (reused if it runs against it), else a new one.

    A new one is waited for until it leads (or for ``CONTROLLER_START_SECONDS`` if it does not
    get the lease by then), so that an early crash is reported and the rollout is followed from
    its first batch on.
    """
    record = controller_record(state)
    if record is not None and record.get("kubeconfig") == kubeconfig:
        return record, True
    stop_controller(state)
    log = state / "controller.log"
    argv = [
        sys.executable,
        "-c",
        "from nodewright_bridge.cli import main; main()",
        "controller",
        "--kubeconfig",
        kubeconfig,
        "--metrics-addr",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]
    base = f"nwb-demo-{os.getpid()}-{time.monotonic_ns()}"  # its identity is <base>_<uuid>
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # keeps running after the demo returns, like the sandbox
            cwd=ROOT,
            env={**os.environ, "POD_NAME": base},
        )
    record = {"pid": proc.pid, "kubeconfig": kubeconfig, "log": str(log)}
    (state / "controller.json").write_text(json.dumps(record))
    deadline = time.monotonic() + CONTROLLER_START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoError(f"the controller exited with code {proc.returncode}; see {log}")
        if _lease_holder(rest).startswith(base + "_"):
            break
        time.sleep(0.2)
    return record, False


def _lease_holder(rest: Rest) -> str:
    try:
        lease = rest.get(resources.LEASES, LEASE_NAME, namespace=CONTROLLER_NAMESPACE)
    except NotFoundError:
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


# ---- the command ---------------------------------------------------------------------------


def down(state: Path, console: Console, *, what: str = "demo") -> None:
    from nodewright_bridge.sandbox import supervisor  # noqa: PLC0415

    if stop_controller(state):
        console.print("controller stopped")
    if supervisor.stop(state / "sandbox"):
        console.print(f"{what} sandbox stopped")
    else:
        console.print(f"no {what} sandbox running")


def run_demo(
    state: Path,
    *,
    per_group: int,
    images: bool,
    live: bool,
    timeout: float,
    console: Console,
) -> int:
    from nodewright_bridge.sandbox import rootfs  # noqa: PLC0415

    started = time.monotonic()
    state.mkdir(parents=True, exist_ok=True)
    nodes = per_group * len(GROUPS)
    mode = "podman" if images else "exec"
    steps = Steps(console, live)
    console.print(
        f"[bold]nodewright-bridge demo[/bold]: {nodes} simulated GPU nodes ({per_group} gpu=a100, "
        f"{per_group} gpu=h100) in {mode} mode; the example roles sysctl-tuning and "
        "kmod-blacklist rolled out in canary batches per compartment",
        highlight=False,
    )
    with steps.spinner("node base rootfs") as say:
        base = rootfs.ensure_base_rootfs(say)
    steps.step(f"node base rootfs ready ({base})")

    image_map = prepare_packages(state)
    steps.step(
        "packages: nwb package init + image layout for "
        + ", ".join(f"{n} {PACKAGE_VERSION}" for n in PACKAGES)
        + f" (in {state / 'packages'})"
    )

    with steps.spinner("sandbox") as say:
        sandbox, reused = ensure_sandbox(
            state / "sandbox", nodes=nodes, mode=mode, image_map=image_map, say=say
        )
    kubeconfig = str(sandbox["kubeconfig"])
    rest = common.connect(kubeconfig, None)
    label_nodes(rest, list(sandbox.get("nodes") or []), per_group)
    steps.step(
        ("sandbox reused" if reused else "sandbox started")
        + f": apiserver {sandbox['server']}, nodes {', '.join(sandbox.get('nodes') or [])}"
    )
    steps.note(f"export KUBECONFIG={kubeconfig}")

    repositories: dict[str, str] = {}
    if images:
        with steps.spinner("package images") as say:
            repositories = build_images(state, str(sandbox.get("registry") or ""), base, say)
    ensure_crds(rest)
    ensure_namespace(rest, CONTROLLER_NAMESPACE)
    policy, cr = demo_objects(repositories)
    policy_result = apply_object(rest, resources.DEPLOYMENT_POLICIES, policy)
    cr_result = apply_object(rest, resources.NODEWRIGHTS, cr)
    cr_name = cr["metadata"]["name"]
    steps.step(
        f"CRDs applied; DeploymentPolicy {policy['metadata']['name']} {policy_result}; "
        f"NodeWright {cr_name} {cr_result}"
    )

    record, controller_reused = ensure_controller(state, kubeconfig, rest)
    steps.step(
        f"controller {'reused' if controller_reused else 'started'} (pid {record['pid']}, "
        f"log {record['log']})"
    )

    def controller_gone() -> str | None:
        if pid_alive(int(record["pid"])):
            return None
        return f"the controller stopped; see {record['log']}"

    steps.step(f"rollout of NodeWright {cr_name} (nwb status {cr_name} --watch):")
    code = status_cmd.watch(
        rest,
        cr_name,
        output="table",
        live=live,
        interval=1.0,
        timeout=timeout,
        max_nodes=40,
        console=console,
        on_tick=controller_gone,
    )
    console.print(
        f"demo finished in {time.monotonic() - started:.0f}s. The sandbox and the controller keep "
        "running; try:",
        highlight=False,
    )
    for hint in (
        f"export KUBECONFIG={kubeconfig}",
        f"nwb status {cr_name}",
        f"nwb plan --live --name {cr_name}",
        "nwb demo --down",
    ):
        console.print(f"  {hint}", highlight=False)
    return code


@click.command(name="demo")
@click.option("--down", "stop", is_flag=True, help="Stop the demo's controller and sandbox.")
@click.option(
    "--nodes-per-group",
    type=click.IntRange(1, 20),
    default=3,
    show_default=True,
    help="Nodes per compartment (gpu=a100, gpu=h100).",
)
@click.option(
    "--images",
    is_flag=True,
    help="Also build real OCI images (podman) into the sandbox registry; nodes run them.",
)
@click.option(
    "--live/--no-live",
    default=None,
    help="Refreshing display (default on a terminal) or one progress line per change.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=10),
    default=DEFAULT_TIMEOUT_SECONDS,
    show_default=True,
    help="Seconds to wait for the rollout.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the demo keeps its sandbox, packages and logs (default: <cache>/demo).",
)
def command(  # noqa: PLR0917 - click passes options positionally
    stop: bool,
    nodes_per_group: int,
    images: bool,
    live: bool | None,
    timeout: float,
    state_dir: Path | None,
) -> None:
    """Run the end-to-end demo on the sandbox: packages, policy, CR, controller, live progress."""
    console = status_cmd.wide_console()
    state = state_dir or state_dir_default()
    if stop:
        down(state, console)
        return
    try:
        code = run_demo(
            state,
            per_group=nodes_per_group,
            images=images,
            live=live if live is not None else console.is_terminal,
            timeout=timeout,
            console=console,
        )
    except (DemoError, common.CommandError) as exc:
        console.print(f"demo failed: {exc}", style="red", highlight=False, markup=False)
        raise click.exceptions.Exit(1) from None
    except PackageError as exc:
        for problem in exc.problems:
            console.print(f"demo failed: {problem}", style="red", highlight=False, markup=False)
        raise click.exceptions.Exit(1) from None
    except (ApiError, NotFoundError) as exc:
        message = f"demo failed: the API server refused: {exc}"
        console.print(message, style="red", highlight=False, markup=False)
        raise click.exceptions.Exit(1) from None
    raise click.exceptions.Exit(code)
