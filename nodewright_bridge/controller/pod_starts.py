"""Creating node pods, validation pods and their vars ConfigMaps, and remembering node pods the
cache has not shown.

Why deterministic names: a restarted controller finds the pod it created before instead of
creating a second one, so a create is create-if-absent (409 AlreadyExists is success). A pod this
process created but the pod cache does not show yet keeps its node from being planned again
(``awaiting``): otherwise the next pass plans the same create, and a busy API server answers
hundreds of needless 409s.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from lifecycle import actions
from lifecycle.spec import NodeWright
from nodewright_bridge.clock import Clock
from nodewright_bridge.controller import podspec
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.errors import AlreadyExistsError
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
    ) -> None:
        self._rest = rest
        self._writer = writer
        self._namespace = namespace
        self._metrics = metrics
        self._clock = clock
        self._unseen: dict[str, dict[str, float]] = {}  # node -> {pod key: created (monotonic)}
        self._lock = threading.Lock()

    def config_map_soon(self, cr: NodeWright, package: str) -> Future[None]:
        """Create the package's vars ConfigMap on a thread; pod creates wait for the future."""
        done: Future[None] = Future()

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
        body = podspec.build_vars_configmap(cr, cr.spec.packages[package])
        body["metadata"]["namespace"] = self._namespace
        self._create(resources.CONFIG_MAPS, body)

    def package_pod(
        self, cr: NodeWright, action: actions.CreatePackagePod, config_map: Future[None] | None
    ) -> None:
        if action.package not in cr.spec.packages:
            return
        request = podspec.PodRequest(
            cr=cr,
            package_name=action.package,
            node=action.node,
            stages=action.stages,
            resource_id=action.resource_id,
            node_order=action.node_order,
            previous_version=action.previous_version,
            attempt=action.attempt,
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
        if not self._create(resources.PODS, pod):
            return None
        with self._lock:
            key = f"{self._namespace}/{pod['metadata']['name']}"
            self._unseen.setdefault(request.node, {})[key] = self._clock.monotonic()
        self._metrics.pods_created.labels(request.cr.metadata.name, kind).inc()
        return pod

    def _create(self, resource: resources.Resource, body: JsonObject) -> bool:
        self._writer.ensure_leading()
        try:
            self._rest.create(resource, body, namespace=self._namespace, metadata_only=True)
        except AlreadyExistsError:
            return False
        return True
