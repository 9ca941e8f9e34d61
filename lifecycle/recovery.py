"""Recovery rules: when a failed (``erroring``) package entry on a node is attempted again.

Why a module of its own: these are the rules an operator reads when a node stays erroring ("what
do I have to fix, and when does it come back?"). The stage planner (``lifecycle.stages``) applies
them per entry, the rollout planner (``lifecycle.rollout``) gives the node its batch slot again.

An entry records what it ran, and so what it failed, with (``PackageState``):

- ``spec``: a fingerprint of the package's whole spec (every field of ``packages.<name>``:
  version, image, digest, vars, configMap, secretVars and the data of those Secrets, tags,
  timeouts, maxAttempts, interrupt, env, resources, ...), taken when an attempt starts (a fix made
  while the failing attempt still runs is a change too) or, for a wait or drain that expired,
  when it gave up. Any change to it is a fix worth trying. Entries written before this field
  existed have none: only their old rule applies (a change of vars/configMap/secretVars/tags,
  ``configHash``), so a controller upgrade never restarts a fleet.
- ``cause``: set when the failure came from outside the package (:class:`Cause`), with
  ``reattemptAt``, the end of a bounded back-off (:class:`OutsideRetry`, a controller setting),
  and ``reattempts``, how many outside re-attempts this cycle made (it doubles the back-off).

A re-attempt is *due* when the spec changed, or for an outside cause when the cause cleared
(judged from the node's facts: no PodDisruptionBudget or unevictable pod blocks the drain, the
podNonInterruptLabels pods are gone, the node is Ready) or the back-off passed. Image pull failures
and drains that only ran out of time cannot be seen clearing: the back-off or a spec change
brings them back.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from lifecycle import memo
from lifecycle.spec import Package

FINGERPRINT_CHARS = 12
# Waiting reasons of a container whose image the kubelet cannot get.
PULL_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
# Waiting reasons of a package pod that will not start by itself: its image cannot be pulled or
# its container cannot be configured (a missing ConfigMap or Secret key). Past the pull deadline
# (``OutsideRetry.pull_deadline``) the entry is erroring with cause ``image-pull``.
START_FAILURES = PULL_REASONS | {"CreateContainerConfigError"}


class Cause(StrEnum):
    """Why an entry failed when the package itself is not to blame."""

    DRAIN = "drain"  # a PodDisruptionBudget or a pod the drain cannot evict blocked it
    DRAIN_EXPIRED = "drain-expired"  # nothing blocked, the evictions took longer than allowed
    PROTECTED_PODS = "protected-pods"  # podNonInterruptLabels pods still running
    IMAGE_PULL = "image-pull"  # the package image could not be pulled
    NOT_READY = "not-ready"  # the node was not Ready (or did not come back Ready)


class Due(StrEnum):
    """Why a failed entry is attempted again."""

    SPEC = "spec changed"
    CLEARED = "cause cleared"
    BACKOFF = "back-off elapsed"
    PICKED = "picked again"  # the rollout gave the node a new slot (e.g. a compartment reset)
    REQUESTED = "rerun asked for"  # ``nwb rerun`` set the entry's ``rerun`` flag


def cause_of(text: str) -> Cause | None:
    """The recorded ``cause`` as a :class:`Cause` (None: the package, or unknown)."""
    try:
        return Cause(text) if text else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class OutsideRetry:
    """Back-off of re-attempts after an outside cause: ``base``, doubling, at most ``cap``; and
    how soon an image pull failure counts as one (``pull_deadline``).

    Controller settings (``nwb controller --outside-retry``, ``--outside-retry-max``,
    ``--image-pull-deadline``).
    """

    base: timedelta = timedelta(minutes=5)
    cap: timedelta = timedelta(hours=1)
    # How long a package pod may wait on an image it cannot pull (``START_FAILURES``) before the
    # entry is erroring, well before ``timeouts.stage`` (``nwb controller --image-pull-deadline``).
    pull_deadline: timedelta = timedelta(minutes=2)

    def delay(self, reattempts: int) -> timedelta:
        """Delay before the next re-attempt after ``reattempts`` earlier ones."""
        return min(self.base * (1 << min(max(reattempts, 0), 16)), self.cap)


DEFAULT_OUTSIDE_RETRY = OutsideRetry()


def fingerprint(package: Package, secret_data: str = "") -> str:
    """Short fingerprint of a package's whole spec plus the data of its secretVars Secrets.

    Fields left at their defaults are not part of it, so a controller that adds a package field
    does not see every recorded failure as a changed spec. Kept per package object
    (``lifecycle.memo``): every node of a batch asks for the same one.
    """
    return _fingerprint(package, secret_data)


@memo.by_identity
def _fingerprint(package: Package, secret_data: str) -> str:
    payload = [package.model_dump(mode="json", by_alias=True, exclude_defaults=True), secret_data]
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_CHARS]


@dataclass(frozen=True, slots=True)
class Blockers:
    """The node facts an outside cause is judged by (``lifecycle.stages.NodeFacts``)."""

    ready: bool
    blocking_pdbs: tuple[str, ...]
    unevictable_pods: int
    protected_pods: int


def cleared(cause: Cause, facts: Blockers) -> bool:
    """The outside cause is gone, as far as the node's facts can tell."""
    if cause is Cause.DRAIN:
        return not facts.blocking_pdbs and not facts.unevictable_pods
    if cause is Cause.PROTECTED_PODS:
        return facts.protected_pods == 0
    if cause is Cause.NOT_READY:
        return facts.ready
    return False  # image pull, a drain that ran out of time: only the back-off tells


def until(cause: Cause) -> str:
    """When a re-attempt comes besides the back-off, for status messages (may be empty)."""
    return {
        Cause.DRAIN: "when no PodDisruptionBudget or unevictable pod blocks the drain",
        Cause.PROTECTED_PODS: "when the podNonInterruptLabels pods are gone",
        Cause.NOT_READY: "when the node is Ready",
    }.get(cause, "")
