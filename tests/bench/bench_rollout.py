"""Benchmark: one ``plan_rollout`` call and a full offline simulation at fleet scale.

Run: ``.venv/bin/python tests/bench/bench_rollout.py [NODES]``. Prints figures; asserts nothing.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from datetime import UTC, datetime

from lifecycle.rollout import NodeView, plan_rollout
from lifecycle.simulation import simulate
from lifecycle.spec import DeploymentPolicy, NodeWright

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    cr = NodeWright.model_validate(
        {"metadata": {"name": "bench"}, "spec": {"deploymentPolicy": "p"}}
    )
    policy = DeploymentPolicy.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {
                "default": {"budget": {"percent": 10}, "strategy": {"exponential": {}}},
                "compartments": [
                    {
                        "name": f"zone-{z}",
                        "selector": {"matchLabels": {"zone": str(z)}},
                        "budget": {"percent": 5},
                        "strategy": {"linear": {"initialBatch": 2, "delta": 5}},
                    }
                    for z in range(3)
                ],
            },
        }
    )
    nodes = [NodeView(name=f"node-{i:05d}", labels={"zone": str(i % 4)}) for i in range(count)]
    start = time.perf_counter()
    first = plan_rollout(cr, policy, nodes, {}, T0)
    fresh = time.perf_counter() - start
    nodes = [replace(n, record=first.records.get(n.name)) for n in nodes]
    start = time.perf_counter()
    plan_rollout(cr, policy, nodes, first.batch_states, T0)
    running = time.perf_counter() - start
    start = time.perf_counter()
    sim = simulate(cr, policy, nodes, start=T0, batch_states=first.batch_states)
    whole = time.perf_counter() - start
    print(
        f"nodes={count} plan(fresh)={fresh * 1000:.1f}ms plan(running batch)={running * 1000:.1f}ms"
    )
    print(f"simulation: {sim.steps} planner calls, {len(sim.batches)} batches, {whole:.2f}s")


if __name__ == "__main__":
    main()
