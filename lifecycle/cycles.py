"""Where one package's cycle stands on a node: read from its recorded entry and its spec.

Why a module of its own: the stage planner of a CR asks these questions of its own entries, and
of the entries other CRs keep on the same node (``lifecycle.peering``), to share one cordon and
one interrupt between rollouts. Both must read a record the same way.
"""

from __future__ import annotations

from lifecycle import interrupts
from lifecycle.nodestate import PackageState, Stage, StageState
from lifecycle.spec import Interrupt, Package

PRE_INTERRUPT = frozenset({Stage.APPLY, Stage.UPGRADE, Stage.CONFIG, Stage.UNINSTALL})
INTERRUPT_STAGES = frozenset({Stage.INTERRUPT, Stage.UNINSTALL_INTERRUPT})
COMPLIANT = "compliant"  # ``PackageState.preflight`` of a cycle check mode found compliant


def uninstall_requested(pkg: Package) -> bool:
    return pkg.uninstall.enabled and pkg.uninstall.apply


def entry_interrupts(pkg: Package, entry: PackageState) -> list[Interrupt]:
    """The interrupts the entry's cycle needs (``lifecycle.interrupts.cycle_interrupts``); none
    for a cycle check mode found compliant (recorded complete without running)."""
    if entry.preflight == COMPLIANT:
        return []
    if entry.stage in (Stage.UNINSTALL, Stage.UNINSTALL_INTERRUPT):
        changed: list[str] = []  # an uninstall cycle interrupts like an install
    else:
        changed = entry.changed_keys
    return interrupts.cycle_interrupts(
        pkg, changed, declared=entry.declared, requested=entry.requested
    )


def is_terminal(pkg: Package, entry: PackageState) -> bool:
    """The entry finished its cycle (a complete config with no interrupt, or post-interrupt)."""
    if entry.state is not StageState.COMPLETE:
        return False
    if entry.stage is Stage.POST_INTERRUPT:
        return True
    return entry.stage is Stage.CONFIG and not entry_interrupts(pkg, entry)


def due_for_interrupt(pkg: Package, entry: PackageState) -> bool:
    """The entry's pre-interrupt work is done and its interrupt has not finished."""
    if entry.stage in INTERRUPT_STAGES and entry.state is StageState.SKIPPED:
        return True
    if entry.state is not StageState.COMPLETE:
        return False
    if entry.stage is Stage.UNINSTALL:
        return True
    return entry.stage is Stage.CONFIG and bool(entry_interrupts(pkg, entry))


def pre_interrupt_open(pkg: Package, entry: PackageState) -> bool:
    """An interrupt cycle still has apply, upgrade, config or uninstall work to run."""
    if entry.stage not in PRE_INTERRUPT or entry.state is not StageState.IN_PROGRESS:
        return False
    return bool(entry_interrupts(pkg, entry))
