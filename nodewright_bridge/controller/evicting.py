"""One round of a node's drain: evict what the snapshot's drain plan says, report what refused.

With ``spec.drain.disableEviction`` the pods are deleted instead (DELETE with the pod's uid as a
precondition, so a replacement that took the name is not touched): no PodDisruptionBudget is
consulted. ``spec.drain.gracePeriod`` goes into the eviction's ``deleteOptions`` or the delete as
``gracePeriodSeconds``; unset, each pod's own grace period applies.

Why one round and not a loop: a drain never blocks a reconcile. Evictions go through the Eviction
API (concurrently), so the API server enforces every PodDisruptionBudget; a 429 names the
refusing budgets - the ones the plan knows cover the pod - and the reconcile comes back after a
short back-off. The stage planner sees the pods that are left (``pods_to_evict``) and gives up at
the drain deadline. Nothing is decided here: the plan was made from the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from lifecycle import draining
from lifecycle.spec import Drain
from nodewright_bridge.controller.node_writes import Outcome
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.errors import (
    ConflictError,
    DisruptionBudgetError,
    ForbiddenError,
    NotFoundError,
    TooManyRequestsError,
)
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.patching import Writer
from nodewright_bridge.k8s.rest import Rest

# Evictions are independent API calls; 8 at once drains a busy GPU node in one round without
# flooding the API server when many nodes drain in the same reconcile.
EVICTION_CONCURRENCY = 8
# A PDB refusal is re-tried on the next reconcile; 5 s lets the budget's controller observe a
# replacement pod becoming Ready without hammering the API server.
PDB_RETRY_SECONDS = 5.0
# Pods still to go (evicted but terminating, or blocked): look again this soon.
DRAIN_RECHECK_SECONDS = 2.0
# A delete (disableEviction) the controller's RBAC refuses: reported as a drain blocker.
FORBIDDEN = "(forbidden)"
FORBIDDEN_ANSWER = [FORBIDDEN]

Announce = Callable[[str, str, str, bool], None]  # (node, reason, note, warning)


class Evictions:
    """Runs drain rounds for the executor."""

    def __init__(self, rest: Rest, writer: Writer, metrics: ProductMetrics) -> None:
        self._rest = rest
        self._writer = writer
        self._metrics = metrics

    def drain(
        self,
        cr: str,
        node: str,
        *,
        plan: draining.DrainPlan,
        evictions: tuple[draining.Eviction, ...],
        outcome: Outcome,
        announce: Announce,
        options: Drain | None = None,
    ) -> None:
        options = options or Drain()
        if plan.blockers:
            lines = [draining.describe_blocker(p, d) for p, d in plan.blockers]
            outcome.drain_blockers[node] = lines
            announce(node, "DrainBlocked", "; ".join(lines), True)
        if plan.waiting_for or evictions:
            outcome.soon(DRAIN_RECHECK_SECONDS)
        if not evictions:
            return
        verb = "deleting (disableEviction)" if options.disable_eviction else "evicting"
        announce(node, "Draining", f"{verb} {len(evictions)} pod(s) for NodeWright {cr}", False)
        go = self._delete if options.disable_eviction else self._evict
        with ThreadPoolExecutor(max_workers=EVICTION_CONCURRENCY) as pool:
            answers = list(pool.map(lambda e: go(e, options.grace_period), evictions))
        if FORBIDDEN_ANSWER in answers:
            line = (
                "spec.drain.disableEviction: the controller may not delete pods here; grant it "
                "(chart value drain.allowPodDelete=true) or evict (disableEviction: false)"
            )
            outcome.drain_blockers.setdefault(node, []).append(line)
            announce(node, "DrainBlocked", line, True)
            answers = [a for a in answers if a != FORBIDDEN_ANSWER]
            outcome.soon(PDB_RETRY_SECONDS)
        for refused in answers:
            if refused is None:
                outcome.evicted += 1
                self._metrics.evictions.labels(cr).inc()
                continue
            self._metrics.pdb_refusals.labels(cr).inc()
            outcome.pdb_blocked.setdefault(node, []).extend(refused)
            outcome.soon(PDB_RETRY_SECONDS)
        if outcome.pdb_blocked.get(node):
            names = ", ".join(sorted(set(outcome.pdb_blocked[node])))
            note = f"eviction refused by PodDisruptionBudget {names}; retrying"
            announce(node, "PDBBlocked", note, True)

    def _evict(self, eviction: draining.Eviction, grace: int | None) -> list[str] | None:
        """Evict one pod. None on success (or already gone), else the refusing budgets."""
        pod = eviction.pod
        path = resources.PODS.path(namespace=pod.namespace, name=pod.name, subresource="eviction")
        body: dict[str, object] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        }
        if grace is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace}
        try:
            self._writer.ensure_leading()  # evictions obey the leader guard like every write
            self._rest.request("POST", path, body=body, eviction=True)
        except NotFoundError:
            return None
        except DisruptionBudgetError as exc:
            # The plan knows the budgets covering the pod; the server's own words otherwise.
            return list(eviction.budgets) or list(exc.budgets) or [f"{pod.namespace}/(unknown)"]
        except TooManyRequestsError as exc:
            return [f"{pod.namespace}/(throttled: {exc.message})"]
        return None

    def _delete(self, eviction: draining.Eviction, grace: int | None) -> list[str] | None:
        """Delete one pod (``disableEviction``): no budget is asked. None on success or gone."""
        pod = eviction.pod
        try:
            self._writer.ensure_leading()
            self._rest.delete(
                resources.PODS,
                pod.name,
                namespace=pod.namespace,
                uid=pod.uid or None,
                grace_period_seconds=grace,
            )
        except (NotFoundError, ConflictError):
            return None  # gone, or the name now belongs to a replacement pod
        except ForbiddenError:
            return [FORBIDDEN]
        except TooManyRequestsError as exc:
            return [f"{pod.namespace}/(throttled: {exc.message})"]
        return None
