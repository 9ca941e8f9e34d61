"""The start of a fresh install rides on its pod: no Node write when the pod starts.

Why: a one-package rollout without interrupt used to write each Node twice for one pod, once
to record the attempt before the pod was created and once for its result. The first write is
only there so that a restarted controller knows the attempt and the batch that started it. The
pod itself can say that: it is created with the entry it runs (``PackageState``) and the node's
batch record in its annotations, and the node records the entry together with the pod's
result. A node so started keeps its ``waiting`` status label (or none) until then; its pod is
what shows it working, and the planner counts it in progress.

When a pod may carry its start (``may_ride``): the node records nothing of the package version
yet (a first install or an upgrade to a new version, attempt 1), the pod is the only thing the
pass does on the node, and the node's status label is absent or ``waiting``. Everything else
(a config change of an installed version, a retry, a cordon, several packages at once) writes
the Node first, as before.

When a pod's carried entry counts (``overlay``): the node records nothing for that key and its
status label is still absent or ``waiting``. So an entry the node has recorded always wins (a
result, a retry, a later cycle), and a failed pod kept for its log never brings back an entry
that was removed after its failure was recorded: removing an entry (an uninstall, an upgrade's
old version) goes with a new status label, and ``nwb reset`` deletes the ended pods that
carried a start. Whenever
the planner writes the node anyway (another package, a new label), the carried entries are
written with it (``stages``), so a label never moves while the Node lacks an entry a pod carries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lifecycle.nodestate import BatchRecord, PackageState, StageState, package_key
from lifecycle.stage_inputs import PodObservation
from lifecycle.status import Status

# The pod annotations that carry the start: the entry (compact JSON of one ``PackageState``)
# and the node's batch record for the CR (the same JSON the Node annotation holds).
ENTRY_ANNOTATION = "bridge.nodewright.io/entry"
BATCH_ANNOTATION = "bridge.nodewright.io/batch"


@dataclass(frozen=True, slots=True)
class Carried:
    """A node's state with the entries its pods carry (``overlay``)."""

    state: Mapping[str, PackageState]
    record: BatchRecord | None
    keys: frozenset[str]  # entries that come from a pod, not from the Node
    record_from_pod: bool  # ``record`` comes from a pod: write it with the node's next write


def overlay(
    state: Mapping[str, PackageState],
    record: BatchRecord | None,
    pods: Sequence[PodObservation],
    status: Status | None,
) -> Carried:
    """``state`` and ``record`` with what this CR's pods on the node carry, where the node
    records nothing of the key and its status label ``status`` is absent or ``waiting`` (the
    newest batch record wins)."""
    if status not in (None, Status.WAITING):
        return Carried(state, record, frozenset(), False)
    merged = dict(state)
    keys: set[str] = set()
    record_from_pod = False
    for pod in pods:
        key = package_key(pod.package, pod.version)
        if pod.carried is None or key in merged:
            continue
        merged[key] = pod.carried
        keys.add(key)
        carried = pod.carried_record
        if carried is not None and (record is None or carried.picked > record.picked):
            record = carried
            record_from_pod = True
    if not keys:
        return Carried(state, record, frozenset(), False)
    return Carried(merged, record, frozenset(keys), record_from_pod)


def may_ride(
    before: Mapping[str, PackageState],
    changed: Mapping[str, PackageState],
    removed: Sequence[str],
    previous_status: Status | None,
) -> str | None:
    """The one key whose start may ride on its pod this pass, or None (see the module docstring).

    ``before`` is what the node records, ``changed``/``removed`` what the pass would write; the
    caller checks that the pass does nothing else on the node but create that key's pod.
    """
    if removed or len(changed) != 1 or previous_status not in (None, Status.WAITING):
        return None
    key, entry = next(iter(changed.items()))
    if key in before or entry.state is not StageState.IN_PROGRESS or entry.attempts != 1:
        return None
    return key
