"""Creating node pods, validation pods and their vars ConfigMaps, and remembering node pods the
cache has not shown.

Why deterministic names: a restarted controller finds the pod it created before instead of
creating a second one, so a create is create-if-absent (409 AlreadyExists is success). A pod this
process created but the pod cache does not show yet keeps its node from being planned again
(``awaiting``): otherwise the next pass plans the same create, and a busy API server answers
hundreds of needless 409s.

Why a vars ConfigMap is created once per process, not once per pass: its name carries the hash of
what it holds (``podspec.vars_configmap_name``), so one that exists is the right one for as long
as it exists, and it exists as long as its CR (the owner reference; nothing else deletes it).
So once this process created it, or found it owned by the CR's uid, the pod starts of later
batches skip the create that would only be answered 409. A CR deleted and created again under
its old name has a new uid, so its first pod start checks again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from lifecycle import actions, pod_records
from lifecycle.spec import NodeWright
from nodewright_bridge.clock import Clock
from nodewright_bridge.controller import podspec, snapshot
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.errors import AlreadyExistsError, ApiError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.patching import Writer
from nodewright_bridge.k8s.rest import Rest

logger = logging.getLogger(__name__)

JsonObject = dict[str, Any]

# A pod we created that the cache has not shown after this long is no longer waited for (a watch
# normally shows it within milliseconds; a relist may have skipped a pod created and deleted).
UNSEEN_POD_SECONDS = 30.0


class PodStarts:
    """Creates package and interrupt pods for the executor."""

    def __init__(
        self,
        rest: Rest,
        writer: Writer,
        namespace: str,
        metrics: ProductMetrics,
        clock: Clock,
        *,
        creating: Callable[[str], None] = lambda name: None,
        started: Callable[[str], None] = lambda node: None,
    ) -> None:
        """``creating(name)`` is told before a pod named ``name`` is created (a delete of an
        earlier pod of that name is no longer the latest word on it); ``started(node)`` after a
        node pod was created on ``node`` (the node now awaits it: ``awaiting``)."""
        self._rest = rest
        self._creating = creating
        self._started = started
        self._writer = writer
        self._namespace = namespace
        self._metrics = metrics
        self._clock = clock
        self._unseen: dict[str, dict[str, float]] = {}  # node -> {pod key: created (monotonic)}
        self._config_maps: dict[str, tuple[str, str]] = {}  # known to exist: name -> (cr, uid)
        self._lock = threading.Lock()

    def config_map_soon(self, cr: NodeWright, package: str) -> Future[None]:
        """Create the package's vars ConfigMap on a thread; pod creates wait for the future
        (done at once when it is known to exist)."""
        done: Future[None] = Future()
        if self._known(cr, podspec.build_vars_configmap(cr, cr.spec.packages[package])):
            done.set_result(None)
            return done

        def create() -> None:
            try:
                self.config_map(cr, package)
            except BaseException as exc:  # handed to the pod creates that wait for it
                done.set_exception(exc)
            else:
                done.set_result(None)

        threading.Thread(target=create, name="vars-configmap", daemon=True).start()
        return done

    def config_map(self, cr: NodeWright, package: str) -> None:
        """Make sure the package's vars ConfigMap exists (see the module docstring)."""
        body = podspec.build_vars_configmap(cr, cr.spec.packages[package])
        if self._known(cr, body):
            return
        name = body["metadata"]["name"]
        body["metadata"]["namespace"] = self._namespace
        if not self._create(resources.CONFIG_MAPS, body):
            try:
                found = self._rest.get(resources.CONFIG_MAPS, name, namespace=self._namespace)
            except ApiError:  # it existed a moment ago, as before: the pod start goes on
                logger.debug("vars ConfigMap not read back", extra={"configmap": name})
                return
            meta = found.get("metadata") or {}
            owners = {str(o.get("uid", "")) for o in meta.get("ownerReferences") or ()}
            if cr.metadata.uid not in owners or meta.get("deletionTimestamp"):
                return  # not (or no longer) the CR's own: checked again at the next pod start
        with self._lock:
            self._config_maps[name] = (cr.metadata.name, cr.metadata.uid)

    def forget(self, cr_name: str) -> None:
        """``cr_name`` was cleaned up after: its ConfigMaps are no longer known."""
        with self._lock:
            for name in [n for n, (c, _) in self._config_maps.items() if c == cr_name]:
                del self._config_maps[name]

    def _known(self, cr: NodeWright, body: JsonObject) -> bool:
        with self._lock:
            known = self._config_maps.get(body["metadata"]["name"])
        return known == (cr.metadata.name, cr.metadata.uid) and bool(cr.metadata.uid)

    def package_pod(
        self,
        cr: NodeWright,
        action: actions.CreatePackagePod,
        config_map: Future[None] | None,
        carried: Mapping[str, str] | None = None,
    ) -> None:
        """``carried``: what the pod carries besides the entry it starts (``action.carries``,
        ``lifecycle.pod_records``): the node's batch record."""
        if action.package not in cr.spec.packages:
            return
        notes: dict[str, str] = {}
        if action.carries is not None:
            notes = {pod_records.ENTRY_ANNOTATION: snapshot.dump_entry(action.carries)}
            notes.update(carried or {})
        request = podspec.PodRequest(
            cr=cr,
            package_name=action.package,
            node=action.node,
            stages=action.stages,
            resource_id=action.resource_id,
            node_order=action.node_order,
            previous_version=action.previous_version,
            attempt=action.attempt,
            annotations=notes,
        )
        pod = self._start(request, "package", config_map)
        if pod is not None:
            logger.info(
                "package pod created",
                extra={"pod": pod["metadata"]["name"], "node": action.node, "cr": cr.metadata.name},
            )

    def interrupt_pod(
        self,
        cr: NodeWright,
        action: actions.CreateInterruptPod,
        config_map: Future[None] | None,
        announce: Callable[[str], None],
    ) -> None:
        """Create the interrupt pod; ``announce(note)`` runs when it was created by this call."""
        if action.package not in cr.spec.packages:
            return
        request = podspec.PodRequest(
            cr=cr,
            package_name=action.package,
            node=action.node,
            stages=(action.stage.value,),
            resource_id=action.resource_id,
            node_order=action.node_order,
            interrupt_type=action.interrupt_type.value,
            interrupt_services=action.services,
            attempt=max(action.attempt, 1),
        )
        if self._start(request, "interrupt", config_map) is not None:
            members = ", ".join(action.members)
            announce(f"{action.interrupt_type.value} interrupt for {members} ({cr.metadata.name})")

    def validation_pod(self, cr: NodeWright, package: str, pod: JsonObject) -> bool:
        """Create a validation pod once its package's vars ConfigMap exists; False when it
        existed. Not remembered as unseen: no node plan waits for it."""
        self.config_map(cr, package)
        pod["metadata"]["namespace"] = self._namespace
        self._creating(pod["metadata"]["name"])
        if not self._create(resources.PODS, pod):
            return False
        self._metrics.pods_created.labels(cr.metadata.name, "validation").inc()
        return True

    def awaiting(self, node: str, seen: Callable[[str], bool]) -> bool:
        """True while a pod this process created on ``node`` is not in the cache yet (``seen``
        answers for a ``namespace/name`` key); forgotten after :data:`UNSEEN_POD_SECONDS`."""
        with self._lock:
            pending = self._unseen.get(node)
            if not pending:
                return False
            now = self._clock.monotonic()
            for key, created in list(pending.items()):
                if seen(key) or now - created > UNSEEN_POD_SECONDS:
                    del pending[key]
            if not pending:
                del self._unseen[node]
                return False
            return True

    def _start(
        self, request: podspec.PodRequest, kind: str, config_map: Future[None] | None
    ) -> JsonObject | None:
        """Create the pod once its package's vars ConfigMap exists (``config_map``: being
        created; None: create it here); None when the pod already existed."""
        if config_map is None:
            self.config_map(request.cr, request.package_name)
        else:
            config_map.result()
        pod = podspec.build_pod(request)
        pod["metadata"]["namespace"] = self._namespace
        self._creating(pod["metadata"]["name"])
        if not self._create(resources.PODS, pod):
            return None
        with self._lock:
            key = f"{self._namespace}/{pod['metadata']['name']}"
            self._unseen.setdefault(request.node, {})[key] = self._clock.monotonic()
        self._started(request.node)
        self._metrics.pods_created.labels(request.cr.metadata.name, kind).inc()
        return pod

    def _create(self, resource: resources.Resource, body: JsonObject) -> bool:
        self._writer.ensure_leading()
        try:
            self._rest.create(resource, body, namespace=self._namespace, metadata_only=True)
        except AlreadyExistsError:
            return False
        return True
