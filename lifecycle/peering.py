"""Several rollouts on one node: one cordon, one drain and one interrupt for all of them.

Why: two NodeWright CRs that both reboot node X used to take it twice (A drains, reboots and
uncordons it; B cordons, drains and reboots it again seconds later, after new pods landed on it).
A GPU node running a week-long job must be disrupted once. Each CR's stage planner reads what the
other CRs recorded on the same node (a :class:`PeerOutlook` each, built by :func:`outlook` from
their state annotation) and follows these rules (docs/architecture.md, "Several rollouts on one
node"):

1. Handover. A later CR may start on a node an earlier CR holds cordoned for a disruptive cycle
   (``lifecycle.sequencing``): it adds itself as a holder, so the node stays unschedulable from
   the first cordon to the last release.
2. Order of the applies. Priority and sequencing still order the work: a later CR runs no pod on
   the node while an earlier one has pre-interrupt work open, an interrupt running or
   post-interrupt work left; a later CR whose cycle has no interrupt waits until the earlier
   one is complete on the node.
3. One interrupt. The earliest CR whose interrupt is due waits while a later CR that joined the
   node still has pre-interrupt work open, then runs one interrupt for every CR due on the node,
   merged as packages merge (reboot > restartAllServices > service; services united), and
   records which CRs it performed it for (``mergedWith``). Those CRs mark their due entries as
   performed by it (``interruptBy``) and complete them when it is done: a new bootID for a
   reboot, the earlier CR's record of the finished interrupt otherwise. If it fails or vanishes,
   their entries are due again and they run their own.

A peer that is paused, disabled or erroring on the node is not waited for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lifecycle import cycles
from lifecycle.nodestate import PackageState, Stage, StageState, package_key
from lifecycle.spec import Interrupt, InterruptType, NodeWright


@dataclass(frozen=True, slots=True)
class PeerOutlook:
    """Where another CR's work stands on the node (see the module docstring).

    Attributes:
        name: the other CR.
        earlier: it comes before the planning CR in priority order.
        holds_cordon: it is a holder of the node's cordon.
        complete: its status on the node is complete.
        idle: paused, disabled or erroring on the node: nothing of it is waited for.
        pre_interrupt_open: an interrupt cycle of it still has apply/config work to run.
        due: the interrupts of its entries waiting for their interrupt (not started).
        running: its interrupt pod runs on the node.
        running_type: the type of that interrupt.
        boot_id: the bootID it recorded when the interrupt started.
        merged_with: the CRs its running or finished interrupt is performed for.
        finished: its last interrupt finished (post-interrupt next or done).
        post_open: post-interrupt work of it is still to run.
        joined_to_me: the interrupts of its entries the planning CR's interrupt performs.
    """

    name: str
    earlier: bool
    holds_cordon: bool = False
    complete: bool = False
    idle: bool = False
    pre_interrupt_open: bool = False
    due: tuple[Interrupt, ...] = ()
    running: bool = False
    running_type: InterruptType | None = None
    boot_id: str = ""
    merged_with: tuple[str, ...] = ()
    finished: bool = False
    post_open: bool = False
    joined_to_me: tuple[Interrupt, ...] = ()

    def performs_for(self, cr: str) -> bool:
        return cr in self.merged_with


def outlook(
    cr: NodeWright,
    state: Mapping[str, PackageState],
    *,
    me: str,
    earlier: bool,
    holds_cordon: bool,
    complete: bool,
    idle: bool,
) -> PeerOutlook:
    """Read ``cr``'s recorded ``state`` on a node the planning CR shares with it."""
    due: list[Interrupt] = []
    joined: list[Interrupt] = []
    flags = {"pre": False, "running": False, "finished": False, "post": False, "erroring": False}
    running_type: InterruptType | None = None
    boot_id = ""
    merged: tuple[str, ...] = ()
    for name, pkg in sorted(cr.spec.packages.items()):
        entry = state.get(package_key(name, pkg.version))
        if entry is None:
            continue
        if entry.state is StageState.ERRORING:
            flags["erroring"] = True
        if entry.stage in cycles.INTERRUPT_STAGES and entry.state is StageState.IN_PROGRESS:
            flags["running"] = True
            running_type = InterruptType(entry.interrupt or InterruptType.NOOP)
            boot_id = entry.boot_id or ""
            merged = tuple(entry.merged_with)
        elif entry.interrupt_by == me:
            joined.extend(cycles.entry_interrupts(pkg, entry))
        elif cycles.due_for_interrupt(pkg, entry) and not entry.interrupt_by:
            due.extend(cycles.entry_interrupts(pkg, entry))
        if cycles.pre_interrupt_open(pkg, entry):
            flags["pre"] = True
        post = entry.stage is Stage.POST_INTERRUPT or (
            entry.stage is Stage.INTERRUPT and entry.state is StageState.COMPLETE
        )
        if post and entry.merged_with:
            flags["finished"] = True
            merged = merged or tuple(entry.merged_with)
        done = entry.stage is Stage.POST_INTERRUPT and entry.state is StageState.COMPLETE
        if post and not done:
            flags["post"] = True
    return PeerOutlook(
        name=cr.metadata.name,
        earlier=earlier,
        holds_cordon=holds_cordon,
        complete=complete,
        idle=idle or flags["erroring"],
        pre_interrupt_open=flags["pre"],
        due=tuple(due) if not flags["running"] else (),
        running=flags["running"],
        running_type=running_type,
        boot_id=boot_id,
        merged_with=merged,
        finished=flags["finished"],
        post_open=flags["post"],
        joined_to_me=tuple(joined),
    )


def pods_wait(peers: Iterable[PeerOutlook], *, interrupt_cycle: bool) -> str:
    """Why a package pod of the planning CR must wait for an earlier CR (rule 2), or ""."""
    for peer in peers:
        if not peer.earlier or peer.complete:
            continue
        if peer.running:
            return f"waits for nodewright {peer.name}'s interrupt"
        if peer.idle:
            continue
        if peer.pre_interrupt_open:
            return f"waits for nodewright {peer.name} to finish its apply"
        if peer.post_open:
            return f"waits for nodewright {peer.name}'s post-interrupt"
        if not interrupt_cycle:
            return f"waits for nodewright {peer.name} to complete on this node"
    return ""


@dataclass(frozen=True, slots=True)
class Gate:
    """The interrupt decision of the planning CR with its peers on the node (rule 3).

    ``action`` is one of ``run`` (start the interrupt; ``merge`` holds the later CRs' due
    interrupts it performs too), ``join`` (``peer``'s running interrupt performs ours), ``wait``
    (``reason`` says for what).
    """

    action: str
    reason: str = ""
    peer: PeerOutlook | None = None
    merge: Mapping[str, Sequence[Interrupt]] | None = None


def interrupt_gate(me: str, peers: Sequence[PeerOutlook]) -> Gate:
    """What the planning CR ``me`` does with its due interrupt, given its peers on the node."""
    for peer in peers:
        if not peer.earlier or peer.complete:
            continue
        if peer.running:
            if peer.performs_for(me):
                return Gate("join", peer=peer)
            return Gate("wait", reason=f"interrupt waits for nodewright {peer.name}'s interrupt")
        if peer.idle:
            continue
        if peer.due:
            return Gate("wait", reason=f"interrupt merges into nodewright {peer.name}'s")
        if peer.pre_interrupt_open or peer.post_open:
            return Gate("wait", reason=f"interrupt waits for nodewright {peer.name}")
    merge: dict[str, Sequence[Interrupt]] = {}
    for peer in peers:
        if peer.earlier or peer.idle or peer.running or peer.complete:
            continue
        if peer.pre_interrupt_open and peer.holds_cordon:
            return Gate(
                "wait", reason=f"interrupt waits for nodewright {peer.name} to finish its apply"
            )
        if peer.due:
            merge[peer.name] = peer.due
    return Gate("run", merge=merge)
