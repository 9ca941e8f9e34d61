"""Samples the e2e nodes' cordon and bootID on a thread, for tests that must prove a node was
never cordoned (or cordoned in one unbroken stretch) and rebooted exactly as often as it should.

The invariant checker sees every write; a test uses these traces to assert what the user cares
about in its own scenario (which nodes were disrupted at all).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

SAMPLE_SECONDS = 0.25


@dataclass
class NodeTrace:
    unschedulable: list[bool] = field(default_factory=list)
    boots: list[str] = field(default_factory=list)

    @property
    def was_cordoned(self) -> bool:
        return True in self.unschedulable

    def cordoned_once(self) -> bool:
        """One unbroken cordoned stretch (the final uncordon is checked on the node itself)."""
        trace = self.unschedulable
        if True not in trace:
            return False
        first = trace.index(True)
        last = len(trace) - 1 - trace[::-1].index(True)
        return all(trace[first : last + 1])

    def runs(self) -> list[tuple[bool, int]]:
        """The trace as (value, samples) runs, for a readable failure."""
        out: list[tuple[bool, int]] = []
        for value in self.unschedulable:
            if out and out[-1][0] == value:
                out[-1] = (value, out[-1][1] + 1)
            else:
                out.append((value, 1))
        return out


class NodeSampler:
    """Reads every node's unschedulable flag and bootID every SAMPLE_SECONDS on a thread."""

    def __init__(self, world: Any, nodes: list[str]) -> None:
        self.world = world
        self.traces = {n: NodeTrace() for n in nodes}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        selector = f"e2e.nodewright.io/test={self.world.id}"
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                items = self.world.core.list_node(label_selector=selector).items
            except Exception:  # the API may be slow under load; keep sampling
                continue
            for node in items:
                trace = self.traces.get(node.metadata.name)
                if trace is None:
                    continue
                trace.unschedulable.append(bool(node.spec.unschedulable))
                boot = node.status.node_info.boot_id
                if not trace.boots or trace.boots[-1] != boot:
                    trace.boots.append(boot)

    def stop(self) -> dict[str, NodeTrace]:
        self._stop.set()
        self._thread.join(10)
        return self.traces

    @property
    def cordoned(self) -> set[str]:
        """The nodes seen unschedulable at least once so far."""
        return {n for n, t in self.traces.items() if True in t.unschedulable}

    @property
    def rebooted(self) -> set[str]:
        """The nodes seen with a second bootID so far."""
        return {n for n, t in self.traces.items() if len(t.boots) > 1}
