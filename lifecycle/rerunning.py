"""What ``nwb rerun`` marks on one node: the entries whose package should run again.

Why a flag the planner owns (``PackageState.rerun``) and not a deleted entry: the entry keeps
what the package declared (its interrupt), so a fresh cycle of a disruptive package is cordoned
and drained before it applies, and the flag lives in the node's state annotation, so it survives a
controller restart. The planner clears it when the cycle starts, which it does only once the
rollout picks the node (the normal paced path; a human cordon is kept by the cordon rule).

Only an entry at rest can be marked: complete at the end of its cycle, or erroring. An entry in
progress is running already; an absent one has not run on the node (the rollout installs it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lifecycle.cycles import is_terminal, uninstall_requested
from lifecycle.nodestate import PackageState, StageState, package_key
from lifecycle.spec import Package


@dataclass(frozen=True, slots=True)
class Rerun:
    """``state`` with the marks, the packages marked and why the others were not."""

    state: dict[str, PackageState]
    marked: tuple[str, ...] = ()
    refused: dict[str, str] = field(default_factory=dict)


def mark_rerun(
    state: Mapping[str, PackageState], packages: Mapping[str, Package], only: str = ""
) -> Rerun:
    """Mark the spec's packages (or just ``only``) to run again (see the module doc)."""
    if only and only not in packages:
        return Rerun(dict(state), refused={only: "is not a package of the CR"})
    out = dict(state)
    marked: list[str] = []
    refused: dict[str, str] = {}
    for name, pkg in sorted(packages.items()):
        if only and name != only:
            continue
        entry = state.get(package_key(name, pkg.version))
        if uninstall_requested(pkg):
            refused[name] = "is being uninstalled"
        elif entry is None:
            refused[name] = f"has no state at {pkg.version} here (the rollout installs it)"
        elif entry.rerun:
            refused[name] = "is marked for a rerun already"
        elif entry.state is StageState.ERRORING or (
            entry.state is StageState.COMPLETE and is_terminal(pkg, entry)
        ):
            out[package_key(name, pkg.version)] = entry.model_copy(update={"rerun": True})
            marked.append(name)
        else:
            refused[name] = f"is in progress ({entry.stage.value} {entry.state.value})"
    return Rerun(out, tuple(marked), refused)
