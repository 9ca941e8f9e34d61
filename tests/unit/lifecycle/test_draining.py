"""Drain decisions: what is evicted, skipped, waited for, and which PDBs block."""

from __future__ import annotations

import pytest

from lifecycle.draining import (
    PdbView,
    PodDisposition,
    PodView,
    blocking_pdbs,
    classify,
    describe_blocker,
    plan_drain,
)
from lifecycle.spec import Drain, LabelSelector

DEFAULT = Drain()


def pod(name: str, **kw: object) -> PodView:
    base: dict[str, object] = {"namespace": "ml", "name": name, "controller_kind": "ReplicaSet"}
    base.update(kw)
    return PodView(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("p", "drain", "expected"),
    [
        (pod("w"), DEFAULT, PodDisposition.EVICT),
        (pod("ds", controller_kind="DaemonSet"), DEFAULT, PodDisposition.SKIP_DAEMONSET),
        (
            pod("static", is_mirror=True, controller_kind="Node"),
            DEFAULT,
            PodDisposition.SKIP_MIRROR,
        ),
        (
            pod("agent", labels={"app.kubernetes.io/managed-by": "nodewright-bridge"}),
            DEFAULT,
            PodDisposition.SKIP_OURS,
        ),
        (pod("done", phase="Succeeded"), DEFAULT, PodDisposition.SKIP_FINISHED),
        (
            pod("failed", phase="Failed", controller_kind=None),
            DEFAULT,
            PodDisposition.SKIP_FINISHED,
        ),
        (pod("going", deleting=True), DEFAULT, PodDisposition.SKIP_DELETING),
        (pod("bare", controller_kind=None), DEFAULT, PodDisposition.BLOCK_UNMANAGED),
        (pod("bare", controller_kind=None), Drain(force=True), PodDisposition.EVICT),
        (pod("scratch", uses_empty_dir=True), DEFAULT, PodDisposition.EVICT),
        (
            pod("scratch", uses_empty_dir=True),
            Drain(delete_empty_dir_data=False),
            PodDisposition.BLOCK_EMPTY_DIR,
        ),
        (
            pod("other", labels={"team": "a"}),
            Drain(pod_selector=LabelSelector(match_labels={"team": "b"})),
            PodDisposition.SKIP_NOT_SELECTED,
        ),
    ],
)
def test_each_pod_kind_gets_the_disposition_an_operator_expects(
    p: PodView, drain: Drain, expected: PodDisposition
) -> None:
    assert classify(p, drain) is expected


def test_a_drain_is_done_only_when_nothing_is_left_to_evict_wait_for_or_unblock() -> None:
    plan = plan_drain([pod("b"), pod("a"), pod("gone", deleting=True)], DEFAULT)
    assert [p.name for p in plan.evict] == ["a", "b"]
    assert [p.name for p in plan.waiting_for] == ["gone"]
    assert not plan.done
    assert plan_drain([pod("ds", controller_kind="DaemonSet")], DEFAULT).done


def test_an_unmanaged_pod_blocks_with_a_message_that_says_what_to_do() -> None:
    plan = plan_drain([pod("bare", controller_kind=None)], DEFAULT)
    ((blocker, why),) = plan.blockers
    assert "spec.drain.force" in describe_blocker(blocker, why)
    assert "ml/bare" in describe_blocker(blocker, why)


def test_only_exhausted_budgets_covering_pods_to_evict_are_blocking() -> None:
    trainer = pod("trainer-0", labels={"app": "trainer"})
    web = pod("web-0", labels={"app": "web"})
    exhausted = PdbView("ml", "trainer-pdb", LabelSelector(match_labels={"app": "trainer"}), 0)
    roomy = PdbView("ml", "web-pdb", LabelSelector(match_labels={"app": "web"}), 1)
    elsewhere = PdbView("other", "x", LabelSelector(match_labels={"app": "trainer"}), 0)
    found = blocking_pdbs(plan_drain([trainer, web], DEFAULT).evict, [roomy, exhausted, elsewhere])
    assert [p.key for p in found] == ["ml/trainer-pdb"]


def test_a_budget_over_a_skipped_pod_does_not_block() -> None:
    ds = pod("agent", labels={"app": "trainer"}, controller_kind="DaemonSet")
    exhausted = PdbView("ml", "trainer-pdb", LabelSelector(match_labels={"app": "trainer"}), 0)
    assert blocking_pdbs(plan_drain([ds], DEFAULT).evict, [exhausted]) == []


def test_an_empty_pdb_selector_covers_every_pod_in_its_namespace() -> None:
    everything = PdbView("ml", "all", LabelSelector(), 0)
    assert blocking_pdbs(plan_drain([pod("x")], DEFAULT).evict, [everything]) == [everything]


def test_a_daemonset_pod_blocks_the_drain_when_daemonsets_are_not_ignored() -> None:
    ds = pod("ds", controller_kind="DaemonSet")
    strict = Drain(ignore_daemon_sets=False)
    assert classify(ds, strict) is PodDisposition.BLOCK_DAEMONSET
    plan = plan_drain([ds, pod("w")], strict)
    assert [p.name for p in plan.evict] == ["w"]
    assert [(p.name, d) for p, d in plan.blockers] == [("ds", PodDisposition.BLOCK_DAEMONSET)]
    line = describe_blocker(ds, PodDisposition.BLOCK_DAEMONSET)
    assert "ml/ds" in line and "spec.drain.ignoreDaemonSets" in line


def test_disable_eviction_consults_no_budget() -> None:
    exhausted = PdbView("ml", "all", LabelSelector(), disruptions_allowed=0)
    to_go = plan_drain([pod("w")], DEFAULT).evict
    assert blocking_pdbs(to_go, [exhausted], DEFAULT) == [exhausted]
    assert blocking_pdbs(to_go, [exhausted], Drain(disable_eviction=True)) == []


def test_drain_options_read_from_the_cr_in_camel_case() -> None:
    drain = Drain.model_validate(
        {"disableEviction": True, "ignoreDaemonSets": False, "gracePeriod": 7}
    )
    chosen = (drain.disable_eviction, drain.ignore_daemon_sets, drain.grace_period)
    assert chosen == (True, False, 7)
    assert Drain().ignore_daemon_sets and Drain().grace_period is None
    with pytest.raises(ValueError, match="gracePeriod"):
        Drain.model_validate({"gracePeriod": -1})
