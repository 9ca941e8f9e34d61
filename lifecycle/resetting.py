"""What ``nwb reset`` changes on one node for one CR: a pure decision, the command writes it.

Why a decision of its own: forgetting a node's state makes the planner start over there (a fresh
install cycle once the rollout picks the node), and letting go of our cordon must follow the
cordon rule (``lifecycle.nodestate.release``) so a node a human cordoned stays cordoned.

- Without packages: every entry of the CR goes, with its status and batch record, and the CR's
  cordon hold is released (the node becomes schedulable only when no other holder is left and it
  was schedulable before the first one came).
- With packages: only their entries (every version) go; when none of the CR's entries is left it
  is a reset of the whole CR, else the cordon stays for the planner, which lets go of it as soon
  as no open interrupt cycle of the CR needs it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from lifecycle.nodestate import CordonRecord, PackageState, Release, release


@dataclass(frozen=True, slots=True)
class NodeReset:
    """The change: ``state`` to write (None: remove the annotation), whether the status and
    batch record go, the cordon release (None: our hold is kept or there is none), and the
    package keys forgotten."""

    state: dict[str, PackageState] | None
    clear_status: bool
    clear_batch: bool
    cordon: Release | None
    removed: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.removed and not self.clear_status and self.cordon is None


def reset_node(
    cr: str,
    state: Mapping[str, PackageState],
    cordon: CordonRecord | None,
    *,
    packages: Collection[str] = (),
    has_status: bool = True,
) -> NodeReset:
    """The reset of CR ``cr`` on a node with ``state`` and ``cordon`` (see the module doc)."""
    wanted = set(packages)
    removed = tuple(sorted(k for k in state if not wanted or k.partition("|")[0] in wanted))
    left = {k: v for k, v in state.items() if k not in removed}
    if wanted and not removed:
        return NodeReset(
            dict(state), clear_status=False, clear_batch=False, cordon=None, removed=()
        )
    if wanted and left:
        return NodeReset(left, clear_status=False, clear_batch=False, cordon=None, removed=removed)
    return NodeReset(
        None,
        clear_status=has_status,
        clear_batch=True,
        cordon=release(cordon, cr),
        removed=removed,
    )
