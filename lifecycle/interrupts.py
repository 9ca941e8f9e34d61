"""Which interrupt a package needs for a cycle, and how interrupts due together on a node merge.

Rules (as NodeWright does):
- An install or upgrade cycle uses the package's own ``interrupt``.
- A config cycle (vars or configMap changed) uses the ``configInterrupts`` whose glob matches a
  changed var name or configMap key; when none matches, that cycle has no interrupt at all, even if
  the package has one (changing an unrelated key must not reboot the fleet).
- Packages due on a node together share one interrupt: reboot > restartAllServices > service >
  noop; equal ``service`` interrupts merge into one with the union of services, sorted. Packages
  are visited by name; the owner is the first package offering the winning interrupt.

The role decides (docs/role-semantics.md, "Which interrupt a cycle gets"): a package the CR gives
no ``interrupt`` uses the one its manifest declares (``declared``, reported by its pods) for
install and upgrade cycles, and every cycle adds what its runs asked for (``requested``: a
deferred reboot or service restarts). A CR that sets ``interrupt`` owns the package's interrupts:
requests are recorded, not acted on.

Unlike NodeWright, removed keys count as changed (a removed sysctl is a change too), and the
changed keys are remembered per node entry, not CR-wide, so a node joining later is not affected by
another node's config history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from lifecycle.spec import Interrupt, InterruptType, Package

# Lower wins. Reboot subsumes every other kind; restartAllServices subsumes named services.
PRIORITY: Mapping[InterruptType, int] = {
    InterruptType.REBOOT: 0,
    InterruptType.RESTART_ALL_SERVICES: 1,
    InterruptType.SERVICE: 2,
    InterruptType.NOOP: 3,
}
# Marker for "every key changed" when the applied key digests are unknown (older records).
ALL_KEYS = "*"


@dataclass(frozen=True, slots=True)
class MergedInterrupt:
    """The one interrupt run for a group of packages; ``owner`` runs it."""

    type: InterruptType
    services: tuple[str, ...]
    owner: str


def matched_config_interrupts(package: Package, changed_keys: Iterable[str]) -> list[Interrupt]:
    """The configInterrupts whose pattern matches a changed key, deduplicated, pattern order."""
    keys = list(changed_keys)
    found: list[Interrupt] = []
    seen: set[tuple[InterruptType, tuple[str, ...]]] = set()
    for pattern in sorted(package.config_interrupts):
        if not any(key == ALL_KEYS or fnmatchcase(key, pattern) for key in keys):
            continue
        interrupt = package.config_interrupts[pattern]
        identity = (interrupt.type, tuple(sorted(interrupt.services)))
        if identity not in seen:
            seen.add(identity)
            found.append(interrupt)
    return found


def cycle_interrupts(
    package: Package,
    changed_keys: Sequence[str],
    *,
    declared: Interrupt | None = None,
    requested: Interrupt | None = None,
) -> list[Interrupt]:
    """Interrupts a cycle of ``package`` needs; ``changed_keys`` empty means install/upgrade."""
    if changed_keys:
        found = matched_config_interrupts(package, changed_keys)
    elif package.interrupt is not None:
        found = [package.interrupt]
    else:
        found = [declared] if declared is not None else []
    if requested is not None and package.interrupt is None:
        found.append(requested)
    return found


def overridden(package: Package, requested: Interrupt | None) -> bool:
    """The CR's own interrupt wins over what the role's runs asked for."""
    return requested is not None and package.interrupt is not None


def requested_interrupt(
    previous: Interrupt | None, *, reboot: bool, services: Sequence[str]
) -> Interrupt | None:
    """Merge a run's requests into what earlier runs of the same cycle asked for."""
    asked = [previous] if previous is not None else []
    if reboot:
        asked.append(Interrupt(type=InterruptType.REBOOT))
    if services:
        asked.append(Interrupt(type=InterruptType.SERVICE, services=sorted(set(services))))
    merged = merge({"run": asked})
    if merged is None:
        return None
    return Interrupt(type=merged.type, services=list(merged.services))


def merge(candidates: Mapping[str, Sequence[Interrupt]]) -> MergedInterrupt | None:
    """Merge the interrupts of packages due together (``package name -> its interrupts``)."""
    best: MergedInterrupt | None = None
    for name in sorted(candidates):
        for interrupt in candidates[name]:
            if interrupt.type is InterruptType.REBOOT:
                return MergedInterrupt(InterruptType.REBOOT, (), name)
            services = (
                tuple(sorted(set(interrupt.services)))
                if interrupt.type is InterruptType.SERVICE
                else ()
            )
            if best is None or PRIORITY[interrupt.type] < PRIORITY[best.type]:
                best = MergedInterrupt(interrupt.type, services, name)
            elif interrupt.type is best.type and best.type is InterruptType.SERVICE:
                union = tuple(sorted(set(best.services) | set(services)))
                best = MergedInterrupt(best.type, union, best.owner)
    return best


def changed_keys(applied: Mapping[str, str], wanted: Mapping[str, str]) -> list[str]:
    """Keys added, removed or whose digest differs, sorted."""
    return sorted(k for k in set(applied) | set(wanted) if applied.get(k) != wanted.get(k))
