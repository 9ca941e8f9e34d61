"""Section 2 of the stage planner: interrupts (reboot, service restarts) on the node.

The interrupts of every package due at the same time merge into one pod, which starts only on a
cordoned, drained, Ready node with no other package pod; a reboot is complete on a new bootID
with Ready, never on pod success alone. Another CR's interrupt may perform ours
(``lifecycle.peering``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lifecycle import cycles, interrupts, peering, stage_failures, stage_packages, stage_prepare
from lifecycle.actions import CreateInterruptPod, DeletePod, VerifyReboot
from lifecycle.cycles import INTERRUPT_STAGES, PRE_INTERRUPT
from lifecycle.nodestate import PackageState, Stage, StageState
from lifecycle.spec import Interrupt, InterruptType, Package
from lifecycle.stage_identities import RESOURCE_ID_CHARS, parse_time, rfc3339, sha
from lifecycle.stage_inputs import PodObservation, PodPhase
from lifecycle.stage_work import (
    Work,
    fmt_duration,
    interrupt_timeout,
    node_erroring,
    pod_failure_text,
    spec_items,
    spec_package,
    wake,
)


def _on_way_to_interrupt(work: Work, pkg: Package, key: str, entry: PackageState) -> bool:
    """Pre-interrupt work of an interrupt cycle still running: the group waits for it."""
    if entry.stage not in PRE_INTERRUPT or not cycles.entry_interrupts(pkg, entry):
        return False
    return entry.state is StageState.IN_PROGRESS or key in work.live_keys


def interrupt_owner(work: Work) -> tuple[str, PackageState] | None:
    for _, _, key in spec_items(work):
        entry = work.state.get(key)
        if (
            entry is not None
            and entry.stage in INTERRUPT_STAGES
            and entry.state is StageState.IN_PROGRESS
        ):
            return key, entry
    return None


def _members(work: Work) -> list[str]:
    return [
        key
        for _, _, key in spec_items(work)
        if (e := work.state.get(key)) is not None
        and e.stage in INTERRUPT_STAGES
        and e.state in (StageState.SKIPPED, StageState.IN_PROGRESS)
        and not e.interrupt_by
    ]


def _group_id(work: Work, keys: Sequence[str]) -> str:
    return sha(",".join(sorted(work.state[k].resource_id for k in keys)))[:RESOURCE_ID_CHARS]


def drive_interrupts(work: Work) -> None:
    owner = interrupt_owner(work)
    if owner is not None:
        _drive_running_interrupt(work, *owner)
        return
    if _drive_joined(work):
        return
    if work.inp.paused or node_erroring(work):
        return
    due: dict[str, tuple[str, Package, PackageState]] = {}
    for name, pkg, key in spec_items(work):
        entry = work.state.get(key)
        if entry is None:
            continue
        if _on_way_to_interrupt(work, pkg, key, entry):
            work.notes.append(f"interrupt waits for {name}")
            return
        if (
            cycles.due_for_interrupt(pkg, entry)
            and entry.stage not in (Stage.UNINSTALL, Stage.UNINSTALL_INTERRUPT)
            and not entry.interrupt_by
            and stage_packages.vars_moved(work, name, pkg, entry)
        ):
            # stage_packages.drive_packages starts its pod
            stage_packages.reapply_config(work, name, pkg, key, entry)
            return
        if cycles.due_for_interrupt(pkg, entry):
            due[key] = (name, pkg, entry)
    if not due:
        return
    candidates = {name: cycles.entry_interrupts(pkg, entry) for name, pkg, entry in due.values()}
    merged = interrupts.merge(candidates)
    if merged is None:
        _skip_interrupt(work, due)
        return
    facts = work.inp.node
    gate = peering.interrupt_gate(work.inp.cr.metadata.name, facts.peers)
    if gate.action == "join":
        assert gate.peer is not None
        _join_interrupt(work, due, gate.peer)
        return
    if gate.action == "wait":
        work.notes.append(gate.reason)
        return
    busy = len(work.live_keys) + facts.foreign_package_pods
    if not facts.ready or busy:
        work.notes.append("interrupt waits for the node to be Ready and idle")
        return
    if not stage_prepare.prepare(work, [key for key in due]):
        return
    owner_key = next(k for k, (name, _, _) in due.items() if name == merged.owner)
    merged_with = sorted(gate.merge or {})
    if merged_with:  # one interrupt for every rollout due on the node (lifecycle.peering)
        theirs = {f"{peer}/": list(asked) for peer, asked in (gate.merge or {}).items()}
        shared = interrupts.merge({**candidates, **theirs})
        assert shared is not None
        merged = interrupts.MergedInterrupt(shared.type, shared.services, merged.owner)
    now_text = rfc3339(work.now)
    for key, (_, _, entry) in due.items():
        common = {
            "stage": _interrupt_stage(entry),
            "boot_id": facts.boot_id,
            "retry_at": "",
            "message": "",
        }
        if key == owner_key:
            work.put(
                key,
                entry,
                state=StageState.IN_PROGRESS,
                attempts=1,
                started=now_text,
                interrupt=merged.type.value,
                merged_with=merged_with,
                **common,
            )
        else:
            work.put(
                key,
                entry,
                state=StageState.SKIPPED,
                attempts=0,
                interrupt="",
                merged_with=[],
                **common,
            )
    _create_interrupt_pod(work, owner_key, merged.type, merged.services)


def _interrupt_stage(entry: PackageState) -> Stage:
    """The stage a due entry is at once its interrupt starts."""
    if entry.stage is Stage.UNINSTALL:
        return Stage.UNINSTALL_INTERRUPT
    return Stage.INTERRUPT if entry.stage is Stage.CONFIG else entry.stage


def _join_interrupt(
    work: Work, due: Mapping[str, tuple[str, Package, PackageState]], peer: peering.PeerOutlook
) -> None:
    """An earlier CR's running interrupt performs ours too: mark the due entries as its."""
    kind = peer.running_type or InterruptType.NOOP
    for key, (_, _, entry) in due.items():
        work.put(
            key,
            entry,
            stage=_interrupt_stage(entry),
            state=StageState.SKIPPED,
            attempts=0,
            started=rfc3339(work.now),
            retry_at="",
            message="",
            boot_id=peer.boot_id or None,
            interrupt=kind.value,
            interrupt_by=peer.name,
            merged_with=[],
        )
    work.notes.append(f"interrupt runs with nodewright {peer.name}'s")


def _drive_joined(work: Work) -> bool:
    """Entries an earlier CR's interrupt performs: done, still running, or due again.

    Done is a new bootID with Ready for a reboot, else the earlier CR's record of the finished
    interrupt. If that interrupt failed or its CR is gone, the entries are due again and this
    CR runs its own. True while one still waits.
    """
    inp = work.inp
    facts = inp.node
    me = inp.cr.metadata.name
    peers = {p.name: p for p in facts.peers}
    waiting = False
    for name, pkg, key in spec_items(work):
        entry = work.state.get(key)
        if entry is None or not entry.interrupt_by:
            continue
        peer = peers.get(entry.interrupt_by)
        reboot = entry.interrupt == InterruptType.REBOOT.value
        rebooted = reboot and bool(entry.boot_id) and facts.boot_id != entry.boot_id
        deadline = (parse_time(entry.started) or inp.now) + interrupt_timeout(pkg)
        running = peer is not None and peer.running and peer.performs_for(me)
        finished = peer is not None and peer.finished and peer.performs_for(me)
        if (rebooted or (finished and not reboot)) and facts.ready:
            _interrupt_done(work, key, entry, interrupt_by="", interrupt="")
        elif (running or rebooted) and inp.now < deadline:
            waiting = True
            wake(work, deadline)
            work.notes.append(f"{name}: interrupt runs with nodewright {entry.interrupt_by}'s")
        else:  # failed, gone or late: due again, run by this CR
            work.put(key, entry, interrupt_by="", interrupt="", boot_id=None)
    return waiting


def _interrupt_done(work: Work, key: str, entry: PackageState, **also: object) -> None:
    """The entry's interrupt finished: an uninstall's key goes, any other entry moves on to
    its post-interrupt stage (``also``: more fields to reset)."""
    if entry.stage is Stage.UNINSTALL_INTERRUPT:
        del work.state[key]
        return
    work.put(
        key,
        entry,
        stage=Stage.INTERRUPT,
        state=StageState.COMPLETE,
        attempts=0,
        retry_at="",
        **also,
    )


def _skip_interrupt(work: Work, due: Mapping[str, tuple[str, Package, PackageState]]) -> None:
    """Due entries whose interrupt vanished from the spec: nothing to run, move on."""
    for key, (_, _, entry) in due.items():
        if entry.stage is Stage.UNINSTALL or entry.stage is Stage.UNINSTALL_INTERRUPT:
            del work.state[key]
        else:
            work.put(key, entry, stage=Stage.INTERRUPT, state=StageState.COMPLETE)


def _create_interrupt_pod(
    work: Work, owner_key: str, kind: InterruptType, services: tuple[str, ...]
) -> None:
    inp = work.inp
    entry = work.state[owner_key]
    name, _, version = owner_key.partition("|")
    pkg = inp.cr.spec.packages[name]
    members = _members(work)
    deadline = (parse_time(entry.started) or inp.now) + interrupt_timeout(pkg)
    work.actions.append(
        CreateInterruptPod(
            node=inp.node.name,
            cr=inp.cr.metadata.name,
            package=name,
            version=version,
            stage=entry.stage,
            interrupt_type=kind,
            services=services,
            members=tuple(k.partition("|")[0] for k in members),
            resource_id=_group_id(work, members),
            node_order=inp.node_order,
            attempt=entry.attempts,
            deadline=deadline,
        )
    )
    work.started_new = True
    wake(work, deadline)


def _drive_running_interrupt(work: Work, key: str, entry: PackageState) -> None:
    inp = work.inp
    facts = inp.node
    name = key.partition("|")[0]
    pkg = inp.cr.spec.packages[name]
    retry_at = parse_time(entry.retry_at)
    reboot = entry.interrupt == InterruptType.REBOOT.value
    rebooted = bool(entry.boot_id) and facts.boot_id != entry.boot_id
    if retry_at is not None and reboot and rebooted:
        # The failed pod was the reboot killing it before the new bootID showed (the node's
        # status write can lag, e.g. while the API server restarts): the reboot is done.
        if facts.ready:
            _complete_interrupt(work, None)
        else:
            work.notes.append("waiting for the node to be Ready after its reboot")
        return
    if retry_at is not None:
        if inp.now < retry_at:
            wake(work, retry_at)
            return
        if inp.paused or not facts.ready or not stage_prepare.prepare(work, [key]):
            return
        entry = work.put(
            key,
            entry,
            attempts=entry.attempts + 1,
            retry_at="",
            started=rfc3339(inp.now),
            boot_id=facts.boot_id,
        )
        for member in _members(work):
            if member != key:
                work.put(member, work.state[member], boot_id=facts.boot_id)
        _create_interrupt_pod(
            work, key, InterruptType(entry.interrupt or InterruptType.NOOP), _services(work)
        )
        return
    pod = work.live_interrupt.get(key)
    started = parse_time(entry.started) or inp.now
    deadline = started + interrupt_timeout(pkg)
    failure = pod.result.failure if pod is not None and pod.result is not None else None
    if reboot:
        done = rebooted and facts.ready
        # A NotReady node is rebooting: its killed pod is no failure.
        failed = pod is not None and pod.phase is PodPhase.FAILED and not rebooted and facts.ready
    else:
        done = (
            pod is not None and pod.phase is PodPhase.SUCCEEDED and failure is None and facts.ready
        )
        failed = pod is not None and (
            pod.phase is PodPhase.FAILED
            or (pod.phase is PodPhase.SUCCEEDED and failure is not None)
        )
    if done:
        _complete_interrupt(work, pod)
        return
    if failed:
        assert pod is not None
        message = failure.message if failure is not None else pod_failure_text(pod)
        stage_failures.fail_attempt(work, key, entry.stage.value, "", message)
        work.actions.append(DeletePod(name=pod.name, node=facts.name, reason="failed"))
        return
    if inp.now >= deadline:
        if entry.interrupt == InterruptType.REBOOT.value:
            message = (
                f"node did not come back with a new bootID and Ready within "
                f"{fmt_duration(interrupt_timeout(pkg))}"
            )
        else:
            message = f"interrupt did not finish within {fmt_duration(interrupt_timeout(pkg))}"
        stage_failures.fail_attempt(work, key, entry.stage.value, "", message)
        if pod is not None:
            work.actions.append(DeletePod(name=pod.name, node=facts.name, reason="deadline"))
        return
    wake(work, deadline)
    if entry.interrupt == InterruptType.REBOOT.value and (
        pod is None or pod.phase is PodPhase.SUCCEEDED or rebooted
    ):
        work.actions.append(
            VerifyReboot(node=facts.name, old_boot_id=entry.boot_id or "", deadline=deadline)
        )
    if pod is None and not rebooted and not inp.paused:
        # Recorded but no pod: the controller stopped between the patch and the create, the
        # executor held the create (the API showed a pod the cache did not: a scheduler with a
        # stale cache can bind one to a cordoned node), or the pod was removed. The node is
        # cordoned and drained again first. The agent's per-resource flag makes the re-created
        # pod a no-op if it already ran; a new bootID (checked above) is what counts for a reboot.
        if not stage_prepare.prepare(work, [key]):
            return
        _create_interrupt_pod(
            work, key, InterruptType(entry.interrupt or InterruptType.NOOP), _services(work)
        )


def _services(work: Work) -> tuple[str, ...]:
    candidates: dict[str, list[Interrupt]] = {}
    for key in _members(work):
        spec = spec_package(work, key)
        if spec is not None:
            candidates[spec[0]] = cycles.entry_interrupts(spec[1], work.state[key])
    for peer in work.inp.node.peers:
        if peer.joined_to_me:
            candidates[f"{peer.name}/"] = list(peer.joined_to_me)
    merged = interrupts.merge(candidates)
    return merged.services if merged is not None else ()


def _complete_interrupt(work: Work, pod: PodObservation | None) -> None:
    for key in _members(work):
        _interrupt_done(work, key, work.state[key])
    if pod is not None:
        work.actions.append(DeletePod(name=pod.name, node=work.inp.node.name, reason="succeeded"))
