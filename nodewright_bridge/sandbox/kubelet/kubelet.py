"""The simulated kubelet: one process, many nodes, one pod watch.

Threads (no per-node or per-pod threads, so a thousand nodes stay cheap):
- the *watch* thread lists and then watches all pods bound to any node (``spec.nodeName!=``) and
  keeps those on our nodes;
- the *loop* thread (every ``TICK_SECONDS``) polls running containers (``poll()`` never blocks),
  sends due node heartbeats, checks reboot-request files and finishes reboots; a simulated
  container that ends at a known moment is also looked at exactly then (as a runtime's exit
  event would report it), so a scale run's pods take their stated duration, not up to a tick more;
- a worker pool runs the blocking work: node registration, status patches, container start and
  kill, deletions. Work for one pod is serialized by ``SyncQueue`` (latest state wins).

Pod lifecycle: Pending (ContainerCreating) -> init containers one by one -> app containers ->
Running + Ready -> Succeeded/Failed when every container has ended and the restart policy says
so. A pod with a deletionTimestamp has its containers killed and is then deleted with grace 0.
A simulated reboot (``SimNode.request_reboot()`` or the reboot-request file) gives the node a new
bootID, reports it NotReady for ``REBOOT_NOT_READY_SECONDS``, fails every live pod on it with reason
``NodeRebooted`` and then reports Ready again.

The API server may go away for a while (``Sandbox.restart_apiserver``). Like a real kubelet, this
one keeps its pods running and catches up: a status, deletion, heartbeat or volume read that fails
because the API is unreachable (a connection error, 429, 5xx) is tried again after
``API_RETRY_SECONDS``; a pod that ended meanwhile is reported once the API is back.
"""

from __future__ import annotations

import contextlib
import datetime
import heapq
import http.client
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from nodewright_bridge.sandbox.kubelet.api import MERGE, STRATEGIC, ApiError, Obj, RawApi
from nodewright_bridge.sandbox.kubelet.nodes import SimNode, new_boot_id
from nodewright_bridge.sandbox.kubelet.runners import (
    KILLED_EXIT_CODE,
    ContainerRunner,
    ContainerSpec,
    ContainerStartError,
    RunningContainer,
    SimulatedContainer,
    SimulateRunner,
    is_package_pod,
)
from nodewright_bridge.sandbox.kubelet.status_patch import merging_lists, status_patch
from nodewright_bridge.sandbox.kubelet.volumes import Materializer, expand, mounts_for, pod_dir

log = logging.getLogger(__name__)

# The phases of a pod that has ended (its containers will not run again).
ENDED_PHASES = ("Succeeded", "Failed")
# Containers are polled this often; it bounds how late an exit is noticed.
TICK_SECONDS = 0.25
# Heartbeats only refresh condition times (no node-lifecycle-controller watches them), so rarely.
HEARTBEAT_SECONDS = 60.0
# Long enough for a watcher to see the NotReady, short enough not to slow tests down.
REBOOT_NOT_READY_SECONDS = 2.0
# Crash-looping containers restart after min(base * 2^n, cap) seconds, like the kubelet's backoff.
RESTART_BACKOFF_BASE_SECONDS = 1.0
RESTART_BACKOFF_CAP_SECONDS = 30.0
# A runner that cannot get the image raises ContainerStartError with one of these reasons; like
# the real kubelet, the container then stays waiting (ErrImagePull, then ImagePullBackOff) and the
# pull is retried after the same back-off, the pod staying Pending: it never fails by itself.
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff"})
# The kubelet keeps at most this much of a termination message.
MAX_MESSAGE_BYTES = 4096
KUBELET_VERSION = "v1.36.3"
NODE_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
NODE_REBOOTED = "NodeRebooted"
WATCH_TIMEOUT_SECONDS = 240
# A write (or volume read) that failed because the API was unreachable is tried again this soon.
API_RETRY_SECONDS = 1.0
_UNAVAILABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class _ApiAwayError(Exception):
    """A container could not be prepared because the API is unreachable for now."""


def api_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) says the API is unreachable for now."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ApiError):
            return seen.status in _UNAVAILABLE_STATUS
        if isinstance(seen, (OSError, http.client.HTTPException)):
            return True
        seen = seen.__cause__
    return False


def _older(pod: Obj, than: Obj) -> bool:
    """``pod`` is an older version of the object ``than`` (by resourceVersion)."""
    try:
        return int(pod["metadata"]["resourceVersion"]) < int(than["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return False


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SyncQueue:
    """Runs ``fn(key)`` on a pool; never twice at once for a key; reruns if kicked meanwhile."""

    def __init__(self, pool: ThreadPoolExecutor, fn: Callable[[str], None]) -> None:
        self._pool, self._fn = pool, fn
        self._lock = threading.Lock()
        self._queued: set[str] = set()
        self._running: set[str] = set()
        self._again: set[str] = set()

    def kick(self, key: str) -> None:
        with self._lock:
            if key in self._running:
                self._again.add(key)
                return
            if key in self._queued:
                return
            self._queued.add(key)
        self._submit(key)

    def _submit(self, key: str) -> None:
        with contextlib.suppress(RuntimeError):  # pool shut down: the kubelet is stopping
            self._pool.submit(self._run, key)

    def _run(self, key: str) -> None:
        with self._lock:
            self._queued.discard(key)
            self._running.add(key)
        try:
            self._fn(key)
        except Exception:  # one pod's failure must not stop the others
            log.exception("sync of %s failed", key)
        finally:
            with self._lock:
                self._running.discard(key)
                rerun = key in self._again
                self._again.discard(key)
                if rerun:
                    self._queued.add(key)
        if rerun:
            self._submit(key)


@dataclass
class Container:
    name: str
    init: bool
    obj: Obj
    handle: RunningContainer | None = None
    started_at: str = ""
    restart_count: int = 0
    terminated: Obj | None = None  # the current "terminated" state, if ended
    last_terminated: Obj | None = None
    restart_due: float = 0.0  # monotonic time of the next restart (crash-loop backoff)
    pull_due: float = 0.0  # monotonic time of the next image pull attempt (pull back-off)
    pull_failures: int = 0
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""

    @property
    def running(self) -> bool:
        return self.handle is not None and self.terminated is None


@dataclass
class PodWorker:
    uid: str
    node: SimNode
    pod: Obj
    boot_id: str
    pod_ip: str
    containers: list[Container] = field(default_factory=list)
    started: bool = False
    terminal: bool = False
    gone: bool = False
    start_time: str = ""
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    sent: Obj | None = None

    @property
    def key(self) -> str:
        meta = self.pod["metadata"]
        return f"{meta['namespace']}/{meta['name']}"

    def live_handles(self) -> list[RunningContainer]:
        return [c.handle for c in self.containers if c.running and c.handle is not None]


class Kubelet:
    """Serves ``nodes`` against the apiserver behind ``api`` using ``runner`` for containers."""

    def __init__(
        self,
        api: RawApi,
        runner: ContainerRunner,
        *,
        state_dir: Path,
        mode: str = "simulate",
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        workers: int = 16,
        workload_runner: ContainerRunner | None = None,
    ) -> None:
        """``runner`` runs package pods (label app.kubernetes.io/managed-by=nodewright-bridge);
        ``workload_runner`` (default: simulate) runs every other pod (docs/node-pod-contract.md,
        "In the sandbox")."""
        self.api = api
        self.runner = runner
        self.workload_runner: ContainerRunner = workload_runner or SimulateRunner()
        self.mode = mode
        self.state_dir = state_dir
        self.heartbeat_seconds = heartbeat_seconds
        self.nodes: dict[str, SimNode] = {}
        self.pods: dict[str, PodWorker] = {}  # by uid
        self._materializer = Materializer(api)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kubelet")
        self._queue = SyncQueue(self._pool, self._sync)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        # (moment, pod uid) when a simulated container ends; the loop kicks the pod then.
        self._ends: list[tuple[float, str]] = []
        self._threads: list[threading.Thread] = []
        self._next_heartbeat: dict[str, float] = {}
        # Called with (pod uid, phase) once the API answered a pod's first Succeeded or Failed
        # report (benchmarks: how far the reports lag the pods' ends).
        self.on_ended_report: Callable[[str, str], None] | None = None
        self._reboots_requested: set[str] = set()
        self._ready_again: dict[str, float] = {}  # node -> monotonic time to report Ready
        # node -> (first seen, Ready as last posted, when Ready last changed): as a real kubelet,
        # a heartbeat moves lastHeartbeatTime only; lastTransitionTime moves when status does.
        self._transitions: dict[str, tuple[str, bool, str]] = {}
        self._pod_counter: dict[str, int] = {}
        self._next_index = 0
        self.watch_synced = threading.Event()

    # --- nodes ----------------------------------------------------------------------------

    def add_nodes(
        self,
        names: Iterable[str],
        *,
        labels: Mapping[str, str] | None = None,
        node_labels: Callable[[str, int], Mapping[str, str]] | None = None,
    ) -> list[SimNode]:
        """Register nodes (in parallel) and return them; existing Node objects are taken over."""
        created: list[SimNode] = []
        with self._lock:
            base = self._next_index  # never reused, so addresses and machine ids stay unique
            names = list(names)
            self._next_index += len(names)
            for offset, name in enumerate(names):
                index = base + offset
                merged = {**(labels or {}), **(node_labels(name, index) if node_labels else {})}
                node = SimNode(
                    name=name,
                    labels=merged,
                    state_dir=self.state_dir / "nodes" / name,
                    index=index,
                    on_reboot_request=self._on_reboot_request,
                )
                node.state_dir.mkdir(parents=True, exist_ok=True)
                created.append(node)
        list(self._pool.map(self._register, created))
        now = time.monotonic()
        with self._lock:
            for i, node in enumerate(created):
                self.nodes[node.name] = node
                spread = self.heartbeat_seconds * (i + 1) / max(len(created), 1)
                self._next_heartbeat[node.name] = now + spread
        # Pods may already be bound to these nodes (a kubelet restart): look at them again.
        self._resync_all()
        return created

    def _register(self, node: SimNode) -> None:
        self.runner.prepare_node(node)
        body = self._node_object(node)
        try:
            self.api.request("POST", "/api/v1/nodes", body=body)
            # The TaintNodesByCondition admission plugin adds node.kubernetes.io/not-ready on
            # create; the node-lifecycle-controller (not run here) would remove it once Ready.
            self.api.request(
                "PATCH",
                f"/api/v1/nodes/{node.name}",
                body={"spec": {"taints": None}},
                content_type=MERGE,
            )
        except ApiError as exc:
            if exc.status != 409:
                raise
            self.api.request(
                "PATCH",
                f"/api/v1/nodes/{node.name}",
                body={"metadata": {"labels": body["metadata"]["labels"]}},
                content_type=STRATEGIC,
            )
            self._patch_node_status(node, ready=True)

    def _node_object(self, node: SimNode) -> Obj:
        labels = {
            "kubernetes.io/hostname": node.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "sandbox",
            **node.labels,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node.name,
                "labels": labels,
                "annotations": {"sandbox.nodewright.io/kubelet": self.mode},
            },
            "spec": {},
            "status": self._node_status(node, ready=True),
        }

    def _node_status(self, node: SimNode, *, ready: bool) -> Obj:
        stamp = now_rfc3339()
        first, was_ready, since = self._transitions.get(node.name, (stamp, ready, stamp))
        if was_ready != ready:
            since = stamp
        self._transitions[node.name] = (first, ready, since)

        def condition(kind: str, status: str, reason: str, message: str) -> Obj:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": since if kind == "Ready" else first,
            }

        return {
            "capacity": dict(NODE_CAPACITY),
            "allocatable": dict(NODE_CAPACITY),
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "ok"),
                condition("Ready", "True", "KubeletReady", "simulated kubelet is posting ready")
                if ready
                else condition("Ready", "False", "KubeletNotReady", "simulated reboot"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": node.internal_ip},
                {"type": "Hostname", "address": node.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{node.index:032x}",
                "systemUUID": f"{node.index:032x}",
                "bootID": node.boot_id,
                "kernelVersion": "6.1.0-sandbox",
                "osImage": "Debian GNU/Linux 12 (bookworm) (simulated)",
                "containerRuntimeVersion": f"nodewright-sandbox://{self.mode}",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def _patch_node_status(self, node: SimNode, *, ready: bool) -> None:
        status = self._node_status(node, ready=ready)
        body = {
            "status": {"conditions": status["conditions"], "nodeInfo": {"bootID": node.boot_id}}
        }
        self.api.request(
            "PATCH", f"/api/v1/nodes/{node.name}/status", body=body, content_type=STRATEGIC
        )

    def remove_nodes(self, names: Iterable[str], *, delete: bool = True) -> None:
        """Stop serving ``names``: kill their pods' containers, release them, delete the Nodes."""
        wanted = set(names)
        with self._lock:
            workers = [w for w in self.pods.values() if w.node.name in wanted]
            nodes = [self.nodes.pop(n) for n in wanted if n in self.nodes]
            for name in wanted:
                self._next_heartbeat.pop(name, None)
                self._transitions.pop(name, None)
        for worker in workers:
            for handle in worker.live_handles():
                handle.kill()
        for node in nodes:
            self.runner.release_node(node)
            if delete:
                self.api.request("DELETE", f"/api/v1/nodes/{node.name}", ok_missing=True)

    # --- reboots --------------------------------------------------------------------------

    def _on_reboot_request(self, node: SimNode) -> None:
        with self._lock:
            self._reboots_requested.add(node.name)

    def reboot(self, name: str) -> None:
        """Reboot node ``name`` now (blocking for the NotReady part only)."""
        node = self.nodes[name]
        # Under the node's status lock: a heartbeat already on its way (built with the old
        # bootID, Ready) goes out before the new bootID, never after it; one due later sees the
        # node rebooting and stays home (_finish_reboots sends the Ready after the reboot).
        with node.lock:
            with self._lock:
                self._ready_again[name] = float("inf")  # the kubelet is "down" from now on
            node.boot_id = new_boot_id()
            log.info("rebooting %s (new bootID %s)", name, node.boot_id)
            try:
                self._patch_node_status(node, ready=False)
            except Exception as exc:
                if not api_unavailable(exc):
                    raise
                # The reboot happens anyway; the Ready heartbeat after it carries the new bootID.
                log.warning("reporting %s NotReady failed (the API is away): %s", name, exc)
            finally:
                with self._lock:
                    self._ready_again[name] = time.monotonic() + REBOOT_NOT_READY_SECONDS
        with self._lock:
            victims = [w for w in self.pods.values() if w.node is node and not w.terminal]
        for worker in victims:
            self._queue.kick(worker.uid)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        for target, name in (
            (self._watch_loop, "kubelet-watch"),
            (self._tick_loop, "kubelet-loop"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, *, delete_nodes: bool = False) -> None:
        self._stop.set()
        self.api.close_watches()
        for thread in self._threads:
            thread.join(timeout=10)
        with self._lock:
            workers = list(self.pods.values())
        for worker in workers:
            for handle in worker.live_handles():
                with contextlib.suppress(Exception):
                    handle.kill()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for node in list(self.nodes.values()):
            with contextlib.suppress(Exception):
                self.runner.release_node(node)
            if delete_nodes:
                with contextlib.suppress(Exception):
                    self.api.request("DELETE", f"/api/v1/nodes/{node.name}", ok_missing=True)
        self.runner.close()
        if self.workload_runner is not self.runner:
            self.workload_runner.close()

    # --- watch ----------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        resource_version = ""
        while not self._stop.is_set():
            try:
                if not resource_version:
                    resource_version = self._list_pods()
                    self.watch_synced.set()
                query = {
                    "fieldSelector": "spec.nodeName!=",
                    "resourceVersion": resource_version,
                    "allowWatchBookmarks": "true",
                }
                for event in self.api.watch(
                    "/api/v1/pods", query, timeout_seconds=WATCH_TIMEOUT_SECONDS
                ):
                    if self._stop.is_set():
                        return
                    if event.type == "ERROR":
                        resource_version = ""  # 410 Gone and friends: list again
                        break
                    meta = event.object.get("metadata", {})
                    resource_version = meta.get("resourceVersion", resource_version)
                    if event.type != "BOOKMARK":
                        self._observe(event.object, deleted=event.type == "DELETED")
            except Exception as exc:
                if self._stop.is_set():
                    return
                if api_unavailable(exc):
                    log.debug("pod watch failed (the API is away); listing again: %s", exc)
                else:
                    log.exception("pod watch failed; listing again")
                resource_version = ""
                self._stop.wait(1.0)

    def _list_pods(self) -> str:
        """List every bound pod; a pod known before the list that it does not show is gone.

        Only pods known *before* the list are judged by it: a resync (``add_nodes``) lists while
        the watch thread goes on, and a pod the watch showed meanwhile is newer than the list.
        """
        with self._lock:
            known = set(self.pods)
        listed = self.api.get("/api/v1/pods", query={"fieldSelector": "spec.nodeName!="}) or {}
        seen = set()
        for pod in listed.get("items") or []:
            seen.add(pod["metadata"]["uid"])
            self._observe(pod, deleted=False)
        with self._lock:
            vanished = [uid for uid in known if uid not in seen and uid in self.pods]
        for uid in vanished:
            worker = self.pods.get(uid)
            if worker is not None:
                self._observe(worker.pod, deleted=True)
        return str(listed.get("metadata", {}).get("resourceVersion", ""))

    def _observe(self, pod: Obj, *, deleted: bool) -> None:
        uid = pod["metadata"]["uid"]
        node_name = pod["spec"].get("nodeName", "")
        with self._lock:
            worker = self.pods.get(uid)
            if worker is None:
                node = self.nodes.get(node_name)
                if node is None or deleted:
                    return
                # A pod seen again keeps the IP the API shows (its sandbox outlived our memory).
                shown = (pod.get("status") or {}).get("podIP") or ""
                worker = PodWorker(
                    uid=uid,
                    node=node,
                    pod=pod,
                    boot_id=node.boot_id,
                    pod_ip=shown or self._pod_ip(node),
                )
                self.pods[uid] = worker
            if deleted or not _older(pod, worker.pod):  # a resync's list may lag the watch
                worker.pod = pod
            if deleted:
                worker.gone = True
        self._queue.kick(uid)

    def _resync_all(self) -> None:
        if self.watch_synced.is_set():
            with contextlib.suppress(Exception):
                self._list_pods()

    def _pod_ip(self, node: SimNode) -> str:
        count = self._pod_counter.get(node.name, 0) + 1
        self._pod_counter[node.name] = count
        return f"10.{128 + (node.index >> 8) % 128}.{node.index % 256}.{1 + count % 253}"

    # --- the loop -------------------------------------------------------------------------

    def _tick_loop(self) -> None:
        """Kick pods whose simulated end is due the moment it is; look over every pod and node
        (exits of real containers, heartbeats, reboots) once a tick. The loop wakes for each
        due end, and a batch of 2,048 pods ends about every 5 ms: looking over 2,048 pods and
        5,000 nodes each time took the GIL from the workers that report those ends."""
        last_look = last_file_check = 0.0
        while not self._stop.wait(self._next_wait(last_look)):
            try:
                now = time.monotonic()
                self._kick_ended(now)
                if now - last_look < TICK_SECONDS:
                    continue
                last_look = now
                self._poll_containers(now)
                self._heartbeats(now)
                if now - last_file_check >= 1.0:
                    last_file_check = now
                    self._check_reboot_files()
                self._start_reboots()
                self._finish_reboots(now)
            except Exception:
                log.exception("kubelet loop iteration failed")

    def _next_wait(self, last_look: float) -> float:
        """Until the next due end or the next look over everything, whichever is first."""
        now = time.monotonic()
        look = max(last_look + TICK_SECONDS - now, 0.0)
        with self._lock:
            first = self._ends[0][0] if self._ends else None
        if first is None:
            return look
        return min(look, max(first - now, 0.0))

    def _kick_ended(self, now: float) -> None:
        with self._lock:
            due = []
            while self._ends and self._ends[0][0] <= now:
                due.append(heapq.heappop(self._ends)[1])
        for uid in due:
            self._queue.kick(uid)

    def _poll_containers(self, now: float) -> None:
        with self._lock:
            workers = [w for w in self.pods.values() if w.started and not w.terminal]
        for worker in workers:
            for container in worker.containers:
                if container.running and container.handle is not None:
                    if container.handle.poll() is not None:
                        self._queue.kick(worker.uid)
                        break
                elif any(0 < due <= now for due in (container.restart_due, container.pull_due)):
                    self._queue.kick(worker.uid)  # a restart or an image pull is due
                    break

    def _heartbeats(self, now: float) -> None:
        due: list[SimNode] = []
        with self._lock:
            for name, when in self._next_heartbeat.items():
                if when <= now and name not in self._ready_again:
                    due.append(self.nodes[name])
                    self._next_heartbeat[name] = now + self.heartbeat_seconds
        for node in due:
            self._pool.submit(self._heartbeat, node)

    def _heartbeat(self, node: SimNode) -> None:
        try:
            with node.lock:  # see reboot(): one status report of a node at a time
                with self._lock:
                    if node.name in self._ready_again:
                        return  # rebooting: the Ready after it is _finish_reboots' heartbeat
                self._patch_node_status(node, ready=True)
        except Exception as exc:
            level = logging.DEBUG if api_unavailable(exc) else logging.WARNING
            log.log(level, "heartbeat of %s failed: %s", node.name, exc)
            with self._lock:  # soon again: it may be the one that reports Ready after a reboot
                if node.name in self._next_heartbeat:
                    self._next_heartbeat[node.name] = time.monotonic() + API_RETRY_SECONDS

    def _check_reboot_files(self) -> None:
        with self._lock:
            nodes = [n for n in self.nodes.values() if n.root_dir is not None]
        for node in nodes:
            flag = node.reboot_request_file
            if flag is not None and flag.exists():
                with contextlib.suppress(OSError):  # gone, or a role made the node's /run ro
                    flag.unlink()
                self._on_reboot_request(node)

    def _start_reboots(self) -> None:
        with self._lock:
            names = [n for n in self._reboots_requested if n in self.nodes]
            self._reboots_requested.clear()
        for name in names:
            self._pool.submit(self._reboot_safely, name)

    def _reboot_safely(self, name: str) -> None:
        try:
            self.reboot(name)
        except Exception:
            log.exception("reboot of %s failed", name)

    def _finish_reboots(self, now: float) -> None:
        with self._lock:
            done = [n for n, when in self._ready_again.items() if when <= now]
            for name in done:
                del self._ready_again[name]
        for name in done:
            node = self.nodes.get(name)
            if node is not None:
                self._pool.submit(self._heartbeat, node)
        if done:
            with self._lock:
                waiting = [w.uid for w in self.pods.values() if w.node.name in done]
            for uid in waiting:
                self._queue.kick(uid)

    # --- one pod --------------------------------------------------------------------------

    def _sync(self, uid: str) -> None:
        try:
            self._sync_pod(uid)
        except Exception as exc:
            if not api_unavailable(exc):
                raise
            log.debug(
                "sync of pod %s failed (the API is away); again in %.0fs: %s",
                uid,
                API_RETRY_SECONDS,
                exc,
            )
            self._kick_at(time.monotonic() + API_RETRY_SECONDS, uid)

    def _kick_at(self, moment: float, uid: str) -> None:
        with self._lock:
            heapq.heappush(self._ends, (moment, uid))

    def _sync_pod(self, uid: str) -> None:
        with self._lock:
            worker = self.pods.get(uid)
        if worker is None:
            return
        pod = worker.pod
        if worker.gone or pod["metadata"].get("deletionTimestamp"):
            self._finish_deletion(worker)
            return
        if worker.terminal:
            if worker.started:
                self._send_status(worker)  # no-op unless the last report did not get through
            return
        if not worker.started:
            with self._lock:
                rebooting = worker.node.name in self._ready_again
            if rebooting:
                return  # the node's kubelet is "down"; _finish_reboots kicks us again
            if pod.get("status", {}).get("phase") in ENDED_PHASES:
                worker.terminal = True  # ended before this kubelet saw it
                return
            self._begin(worker)
        if worker.boot_id != worker.node.boot_id:
            self._fail_for_reboot(worker)
        else:
            self._advance(worker)
        self._send_status(worker)

    def _begin(self, worker: PodWorker) -> None:
        worker.started = True
        worker.start_time = now_rfc3339()
        spec = worker.pod["spec"]
        first = "PodInitializing" if spec.get("initContainers") else "ContainerCreating"
        worker.containers = [
            Container(name=c["name"], init=True, obj=c, waiting_reason="PodInitializing")
            for c in spec.get("initContainers") or []
        ] + [
            Container(
                name=c["name"],
                init=False,
                obj=c,
                waiting_reason=first,
            )
            for c in spec.get("containers") or []
        ]
        if not self.runner_for(worker.pod).starts_at_once:
            self._send_status(worker)  # ContainerCreating while a real start takes its time

    def _restart_policy(self, worker: PodWorker) -> str:
        return str(worker.pod["spec"].get("restartPolicy", "Always"))

    def _advance(self, worker: PodWorker) -> None:
        policy = self._restart_policy(worker)
        now = time.monotonic()
        for container in worker.containers:
            self._collect(container)
        for container in (c for c in worker.containers if c.init):
            if container.terminated is None:
                if container.handle is None:
                    self._start_container(worker, container, now)
                    self._collect(container)
                if container.terminated is None:
                    return  # wait for this init container (or its image)
            if container.terminated["exitCode"] == 0:
                continue
            if policy == "Never":
                self._end_pod(worker)
                return
            self._maybe_restart(worker, container, now)
            return
        for container in (c for c in worker.containers if not c.init):
            if container.handle is None and container.terminated is None:
                self._start_container(worker, container, now)
                self._collect(container)
        for container in (c for c in worker.containers if not c.init):
            ended = container.terminated
            if ended is None:
                continue
            if policy == "Always" or (policy == "OnFailure" and ended["exitCode"] != 0):
                self._maybe_restart(worker, container, now)
        apps = [c for c in worker.containers if not c.init]
        if apps and all(c.terminated is not None and not c.restart_due for c in apps):
            self._end_pod(worker)

    def _maybe_restart(self, worker: PodWorker, container: Container, now: float) -> None:
        if not container.restart_due:
            delay = min(
                RESTART_BACKOFF_BASE_SECONDS * 2**container.restart_count,
                RESTART_BACKOFF_CAP_SECONDS,
            )
            container.restart_due = now + delay
            container.waiting_reason = "CrashLoopBackOff"
            return
        if now < container.restart_due:
            return
        container.last_terminated = container.terminated
        container.terminated = None
        container.handle = None
        container.restart_due = 0.0
        container.restart_count += 1
        self._start_container(worker, container)
        self._collect(container)

    def _end_pod(self, worker: PodWorker) -> None:
        ok = all(c.terminated and c.terminated["exitCode"] == 0 for c in worker.containers)
        worker.phase = "Succeeded" if ok else "Failed"
        worker.terminal = True

    def _collect(self, container: Container) -> None:
        """Record the exit of a container whose handle reports one."""
        if container.handle is None or container.terminated is not None:
            return
        code = container.handle.poll()
        if code is None:
            return
        message = ""
        with contextlib.suppress(Exception):
            message = container.handle.termination_message()
        container.terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": container.started_at,
            "finishedAt": now_rfc3339(),
            "containerID": self._container_id(container),
        }
        if message:
            container.terminated["message"] = _truncate(message)

    def _container_id(self, container: Container) -> str:
        return f"sandbox://{id(container):x}-{container.restart_count}"

    def runner_for(self, pod: Obj) -> ContainerRunner:
        """The package-mode runner for package pods, the workload runner for the rest."""
        package = is_package_pod(pod["metadata"].get("labels"))
        return self.runner if package else self.workload_runner

    def _start_container(
        self, worker: PodWorker, container: Container, now: float | None = None
    ) -> None:
        if (
            container.pull_due
            and (now if now is not None else time.monotonic()) < container.pull_due
        ):
            return  # still backing off an image pull
        try:
            runner = self.runner_for(worker.pod)
            try:
                spec = self._container_spec(worker, container, runner)
            except Exception as exc:
                if api_unavailable(exc):  # its ConfigMaps, Secrets or token could not be read
                    raise _ApiAwayError(str(exc)) from exc
                raise
            container.handle = runner.start(worker.node, spec)
            if isinstance(container.handle, SimulatedContainer) and container.handle.deadline:
                self._kick_at(container.handle.deadline, worker.uid)
            container.started_at = now_rfc3339()
            container.pull_due = 0.0
            container.waiting_message = ""
        except _ApiAwayError as exc:
            # Stay waiting, as a kubelet does until it can mount the volumes.
            container.waiting_message = _truncate(f"API unavailable: {exc}")
            container.pull_due = time.monotonic() + API_RETRY_SECONDS
            self._kick_at(container.pull_due, worker.uid)
        except ContainerStartError as exc:
            if exc.reason in IMAGE_PULL_REASONS:
                self._pull_failed(container, str(exc))
            else:
                self._start_failed(container, str(exc), exc.reason, exc.exit_code)
        except Exception as exc:  # a runner bug must fail this pod, not the kubelet
            log.exception("starting %s in %s failed", container.name, worker.key)
            self._start_failed(container, f"{type(exc).__name__}: {exc}", "StartError", 128)

    def _pull_failed(self, container: Container, message: str) -> None:
        """The image could not be pulled: stay waiting and try again after a back-off."""
        delay = min(
            RESTART_BACKOFF_BASE_SECONDS * 2**container.pull_failures, RESTART_BACKOFF_CAP_SECONDS
        )
        container.waiting_reason = (
            "ErrImagePull" if not container.pull_failures else "ImagePullBackOff"
        )
        container.waiting_message = _truncate(message)
        container.pull_failures += 1
        container.pull_due = time.monotonic() + delay

    def _start_failed(self, container: Container, message: str, reason: str, code: int) -> None:
        stamp = now_rfc3339()
        container.terminated = {
            "exitCode": code,
            "reason": reason,
            "message": _truncate(message),
            "startedAt": stamp,
            "finishedAt": stamp,
        }

    def _container_spec(
        self, worker: PodWorker, container: Container, runner: ContainerRunner
    ) -> ContainerSpec:
        pod, obj, node = worker.pod, container.obj, worker.node
        meta, spec = pod["metadata"], pod["spec"]
        base = pod_dir(node.state_dir, worker.uid)
        run_dir: Path | None = None
        termination_log: Path | None = None
        env: dict[str, str] = {}
        mounts = []
        if runner.materializes:
            run_dir = base / "containers" / f"{container.name}-{container.restart_count}"
            run_dir.mkdir(parents=True, exist_ok=True)
            termination_log = run_dir / "termination-log"
            termination_log.write_bytes(b"")
            host_ip = node.internal_ip
            env = self._materializer.env(pod, obj, host_ip=host_ip, pod_ip=worker.pod_ip)
            volumes = self._materializer.volumes(
                pod, base / "volumes", host_ip=host_ip, pod_ip=worker.pod_ip
            )
            mounts = mounts_for(obj, volumes, base / "volumes")
        else:
            env = {e["name"]: e.get("value", "") for e in obj.get("env") or [] if "value" in e}
        security = obj.get("securityContext") or {}
        return ContainerSpec(
            namespace=meta["namespace"],
            pod_name=meta["name"],
            pod_uid=worker.uid,
            node_name=node.name,
            name=container.name,
            image=obj.get("image", ""),
            command=tuple(expand(part, env) for part in obj.get("command") or []),
            args=tuple(expand(part, env) for part in obj.get("args") or []),
            env=env,
            volume_mounts=tuple(mounts),
            working_dir=obj.get("workingDir", ""),
            privileged=bool(security.get("privileged")),
            host_pid=bool(spec.get("hostPID")),
            host_network=bool(spec.get("hostNetwork")),
            init=container.init,
            restart_policy=self._restart_policy(worker),
            termination_message_path=obj.get("terminationMessagePath", "/dev/termination-log"),
            termination_log=termination_log,
            scratch_dir=run_dir,
            pod_labels=dict(meta.get("labels") or {}),
            pod_annotations=dict(meta.get("annotations") or {}),
            security_context={**(spec.get("securityContext") or {}), **security},
        )

    def _fail_for_reboot(self, worker: PodWorker) -> None:
        for container in worker.containers:
            if container.running and container.handle is not None:
                with contextlib.suppress(Exception):
                    container.handle.kill()
            if container.terminated is None:
                container.terminated = {
                    "exitCode": KILLED_EXIT_CODE,
                    "reason": "Error",
                    "message": "node rebooted",
                    "startedAt": container.started_at or now_rfc3339(),
                    "finishedAt": now_rfc3339(),
                }
            container.restart_due = 0.0
        worker.phase = "Failed"
        worker.reason = NODE_REBOOTED
        worker.message = f"Node {worker.node.name} rebooted"
        worker.terminal = True

    def _finish_deletion(self, worker: PodWorker) -> None:
        for container in worker.containers:
            if container.running and container.handle is not None:
                with contextlib.suppress(Exception):
                    container.handle.kill()
        meta = worker.pod["metadata"]
        if not worker.gone:
            body = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": worker.uid},
            }
            try:
                self.api.request(
                    "DELETE",
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    body=body,
                    ok_missing=True,
                )
            except ApiError as exc:
                if exc.status != 409:  # 409: a newer pod with this name; ours is gone
                    raise
        with self._lock:
            self.pods.pop(worker.uid, None)
        if self.runner_for(worker.pod).materializes:  # only such runners get a pod dir
            shutil.rmtree(pod_dir(worker.node.state_dir, worker.uid), ignore_errors=True)

    # --- status ---------------------------------------------------------------------------

    def _send_status(self, worker: PodWorker) -> None:
        status = self._status(worker)
        sent = worker.sent
        if sent is None:  # a first report: the API may show one of an earlier worker
            sent = merging_lists(worker.pod.get("status") or {}) or None
        patch = status_patch(sent, status)
        if not patch:
            return
        meta = worker.pod["metadata"]
        try:
            self.api.request(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                body={"metadata": {"uid": worker.uid}, "status": patch},
                content_type=STRATEGIC,
            )
        except ApiError as exc:
            if exc.status in (404, 409):
                return  # deleted meanwhile; the watch tells us
            raise
        ended = status.get("phase") in ENDED_PHASES
        first_end = ended and (sent or {}).get("phase") not in ENDED_PHASES
        worker.sent = status
        if first_end and self.on_ended_report is not None:
            self.on_ended_report(worker.uid, status["phase"])

    def _status(self, worker: PodWorker) -> Obj:
        inits = [c for c in worker.containers if c.init]
        apps = [c for c in worker.containers if not c.init]
        init_done = all(c.terminated is not None and c.terminated["exitCode"] == 0 for c in inits)
        all_running = bool(apps) and all(c.running for c in apps)
        if not worker.terminal:
            worker.phase = "Running" if any(c.running or c.terminated for c in apps) else "Pending"
        ready = worker.phase == "Running" and all_running
        stamp = worker.start_time

        def condition(kind: str, ok: bool, reason: str = "") -> Obj:
            cond: Obj = {"type": kind, "status": "True" if ok else "False"}
            cond["lastTransitionTime"] = stamp
            if reason and not ok:
                cond["reason"] = reason
            return cond

        not_ready = "PodCompleted" if worker.terminal else "ContainersNotReady"
        host_network = bool(worker.pod["spec"].get("hostNetwork"))
        pod_ip = worker.node.internal_ip if host_network else worker.pod_ip
        status: Obj = {
            "phase": worker.phase,
            "hostIP": worker.node.internal_ip,
            "hostIPs": [{"ip": worker.node.internal_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": stamp,
            "conditions": [
                condition("PodReadyToStartContainers", not worker.terminal),
                condition("Initialized", init_done, "ContainersNotInitialized"),
                condition("Ready", ready, not_ready),
                condition("ContainersReady", ready, not_ready),
                condition("PodScheduled", True),
            ],
            "containerStatuses": [self._container_status(c) for c in apps],
        }
        if inits:
            status["initContainerStatuses"] = [self._container_status(c) for c in inits]
        if worker.reason:
            status["reason"] = worker.reason
            status["message"] = worker.message
        return status

    def _container_status(self, container: Container) -> Obj:
        state: Obj
        if container.terminated is not None and not container.restart_due:
            state = {"terminated": container.terminated}
        elif container.running:
            state = {"running": {"startedAt": container.started_at}}
        else:
            waiting: Obj = {"reason": container.waiting_reason}
            if container.waiting_message:
                waiting["message"] = container.waiting_message
            state = {"waiting": waiting}
        out: Obj = {
            "name": container.name,
            "image": container.obj.get("image", ""),
            "imageID": "",
            "ready": container.running and not container.init,
            "started": container.running,
            "restartCount": container.restart_count,
            "state": state,
            "lastState": {},
        }
        if container.running or container.terminated is not None:
            out["containerID"] = self._container_id(container)
        last = container.terminated if container.restart_due else container.last_terminated
        if last is not None:
            out["lastState"] = {"terminated": last}
        return out


def _truncate(message: str) -> str:
    data = message.encode()
    if len(data) <= MAX_MESSAGE_BYTES:
        return message
    return data[:MAX_MESSAGE_BYTES].decode(errors="ignore")
