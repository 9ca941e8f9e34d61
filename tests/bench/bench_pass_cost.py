"""Benchmark: the CPU cost of one reconcile pass over N nodes of which K changed since the last.

Why: a pass should cost what changed, not the fleet (issue 17). This builds a fleet in memory
(no sandbox): the real reconciler and executor on the in-memory API of
``nodewright_bridge.testing``, its caches filled as the informers fill them. A real rollout is
driven to mid-flight - 40 % of the nodes complete, 40 % running their package pod, the rest
waiting for their batch - and then, per K, passes run where K random nodes (and their package
pods) got a new resourceVersion and a label the CR does not read, the clock one second on.
Such a change decides nothing new, so every pass writes nothing and only the work of looking
is measured.

Then the batch that was running ends and the next one starts, and its finished pods are put
back in the pod cache: deleted by the API, not yet shown by the watch, as while the background
senders work through a big batch's deletes (each pass plans those deletes again; the senders
drop the repeats). Those passes are measured too.

Prints, per N and K, the CPU seconds of one pass (``time.process_time``: the machine is shared,
CPU time is steadier than wall-clock), the median and the least of ``--passes`` passes after a
warm-up one (a pass that runs a full garbage collection costs more: the median shows them when
they are frequent), and the full (generation 2) garbage collections those passes ran.

Run: ``.venv/bin/python tests/bench/bench_pass_cost.py [--nodes 1000 5000 10000]
[--changed 0 10 500] [--passes 7]``. Not collected by pytest (file name); asserts nothing.
"""

from __future__ import annotations

import argparse
import copy
import gc
import pickle
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from controller_world import ControllerWorld, node, nodewright

from nodewright_bridge.k8s import caches, resources

CR = "tune"
POOL = {"pool": "gpu"}
SPEC = {
    "nodeSelectors": {"matchLabels": POOL},
    "interruptionBudget": {"percent": 40},
    "packages": {"tune": {"version": "1.0.0", "image": "registry.local:5000/tune"}},
}


def mid_rollout(nodes: int) -> ControllerWorld:
    """A world whose first batch (40 %) is complete and whose second one runs its pods."""
    world = ControllerWorld()
    for i in range(nodes):
        world.add(resources.NODES, node(f"n{i:05d}", POOL))
    world.add(resources.NODEWRIGHTS, nodewright(CR, SPEC))
    world.validate(CR)
    world.step(CR)  # batch 1 starts its pods
    world.finish_pods(CR)
    quiet(world)  # batch 1 completes (bookkeeping is written a bounded number per pass)
    for pod in world.pods(CR):  # batch 2 started: the kubelet reports its pods running
        if "status" not in pod:
            running = {"running": {"startedAt": "2025-01-01T00:00:00Z"}}
            pod["status"] = {
                "phase": "Running",
                "containerStatuses": [{"name": "agent", "state": running}],
            }
            world.api.put(resources.PODS, pod)
    quiet(world)
    return world


def world_of(nodes: int, keep: Path | None) -> ControllerWorld:
    """``mid_rollout(nodes)``, or the cluster it built before, kept in ``keep`` (a fresh
    controller on it: its first pass, a warm-up, plans every node)."""
    saved = keep / f"mid-rollout-{nodes}.pickle" if keep is not None else None
    if saved is not None and saved.exists():
        world = ControllerWorld()
        for resource, obj in pickle.loads(saved.read_bytes()):
            world.api.put(resource, obj)
        world.sync()
        return world
    world = mid_rollout(nodes)
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        kinds = {r.plural: r for r in vars(resources).values() if isinstance(r, resources.Resource)}
        objects = [(kinds[path.split("/")[-2]], o) for path, o in world.api.stored()]
        saved.write_bytes(pickle.dumps(objects))
    return world


def quiet(world: ControllerWorld) -> None:
    """Step until a pass writes nothing."""
    for _ in range(200):
        before = len(world.api.requests)
        world.step(CR)
        world.reconciler.executor.wait_for_deletes(60)
        if not any(m != "GET" for m, _ in world.api.requests[before:]):
            return
    raise SystemExit("the rollout did not settle")


def awaiting_deletes(world: ControllerWorld) -> int:
    """The running batch ends, the next starts; the ended pods, deleted by now, are put back in
    the cache (their watch events not seen yet). Returns how many."""
    world.finish_pods(CR)
    ended = [p for p in world.pods(CR) if (p.get("status") or {}).get("phase") == "Succeeded"]
    quiet(world)
    for pod in ended:
        meta = pod["metadata"]
        world.stores.package_pods.put(f"{meta['namespace']}/{meta['name']}", pod)
    return len(ended)


def touch(world: ControllerWorld, names: list[str], serial: int) -> None:
    """``names`` and their package pods get a new resourceVersion and an unread label."""
    stores = world.stores
    for name in names:
        fresh = copy.copy(stores.nodes.get(name))
        meta = dict(fresh["metadata"])
        meta["resourceVersion"] = str(10**9 + serial)
        meta["labels"] = {**meta.get("labels", {}), "bench/tick": str(serial)}
        fresh["metadata"] = meta
        stores.nodes.put(name, fresh)
        for pod in stores.package_pods.by_index(caches.BY_NODE, name):
            moved = copy.copy(pod)
            pmeta = dict(moved["metadata"])
            pmeta["resourceVersion"] = str(10**9 + serial)
            moved["metadata"] = pmeta
            stores.package_pods.put(f"{pmeta['namespace']}/{pmeta['name']}", moved)


def pass_cost(
    world: ControllerWorld, changed: int, passes: int, rng: random.Random
) -> tuple[float, float, int]:
    names = world.stores.nodes.keys()
    costs = []
    full = gc.get_stats()[2]["collections"]
    for i in range(passes + 1):
        touch(world, rng.sample(names, min(changed, len(names))), serial=rng.randrange(10**8))
        world.clock.advance(1.0)
        started = time.process_time()
        world.reconciler.reconcile(CR)
        spent = time.process_time() - started
        if i:  # the first pass after a change of K warms up
            costs.append(spent)
    return statistics.median(costs), min(costs), gc.get_stats()[2]["collections"] - full


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--changed", type=int, nargs="+", default=[0, 10, 500])
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument(
        "--keep", type=Path, help="keep the built clusters here and reuse them (faster reruns)"
    )
    args = parser.parse_args()
    rng = random.Random(17)
    print(f"{'nodes':>7} {'changed':>8} {'cpu s/pass':>11} {'(min)':>8} {'full GCs':>9}")
    for nodes in args.nodes:
        world = world_of(nodes, args.keep)
        writes = len(world.api.requests)
        for changed in args.changed:
            median, least, full = pass_cost(world, changed, args.passes, rng)
            print(f"{nodes:>7} {changed:>8} {median:>11.4f} {least:>8.4f} {full:>9}", flush=True)
        extra = [r for r in world.api.requests[writes:] if r[0] != "GET"]
        if extra:
            print(f"        (the measured passes sent {len(extra)} writes, e.g. {extra[:3]})")
        pending = awaiting_deletes(world)
        median, least, full = pass_cost(world, 0, args.passes, rng)
        print(
            f"{nodes:>7} {'0':>8} {median:>11.4f} {least:>8.4f} {full:>9}"
            f"  ({pending} finished pods awaiting their delete)",
            flush=True,
        )


if __name__ == "__main__":
    main()
