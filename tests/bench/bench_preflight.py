"""Benchmark: what check mode spares on a 12-node exec fleet where 6 (then all 12) nodes already
have the change.

Run: ``.venv/bin/python tests/bench/bench_preflight.py [NODES]`` (root; the sandbox's cached
control plane). Prints figures; asserts nothing.

Each scenario gets its own sandbox with NODES exec-mode nodes (real agent, real Ansible, one
root filesystem per node). The example role ``host-tuning`` (a sysctl drop-in and a kernel
command line whose change notifies the reboot handler) is first applied to half of them (then
to all: a full-fleet no-op rollout) by a CR that is then deleted, so those nodes are compliant
but carry no record of ours. Then a CR over all nodes rolls the same role out in batches of
``BATCH``, with and without ``preflight: true``. Printed per scenario: wall time from the CR's
creation to complete, cordons, drains (every cordoned node is drained), reboots, and the
node-minutes spent cordoned.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "e2e"), str(ROOT / "tests" / "support")]

from e2e_harness import (  # noqa: E402 - the e2e harness is the bench's sandbox too
    CRDS,
    E2E,
    EXEC_REGISTRY,
    NAMESPACE,
    DispatchRunner,
    World,
    _package_dirs,
    wait_for,
)

from nodewright_bridge.sandbox import Sandbox  # noqa: E402

BATCH = 3
HAS = "bench.nodewright.io/has"  # the nodes given the change before the measured rollout
SAMPLE_SECONDS = 0.2


class Disruptions:
    """Samples every node's cordon and bootID; integrates the time each spends cordoned."""

    def __init__(self, world: World, nodes: list[str]) -> None:
        self.world = world
        self.cordons = dict.fromkeys(nodes, 0)
        self.cordoned_seconds = dict.fromkeys(nodes, 0.0)
        self.boots: dict[str, set[str]] = {n: set() for n in nodes}
        self._was = dict.fromkeys(nodes, False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(SAMPLE_SECONDS):
            now = time.monotonic()
            try:
                items = self.world.core.list_node(
                    label_selector=f"e2e.nodewright.io/test={self.world.id}"
                ).items
            except Exception:
                continue
            for node in items:
                name = node.metadata.name
                if name not in self.cordons:
                    continue
                cordoned = bool(node.spec.unschedulable)
                if cordoned and not self._was[name]:
                    self.cordons[name] += 1
                if cordoned:
                    self.cordoned_seconds[name] += now - last
                self._was[name] = cordoned
                self.boots[name].add(node.status.node_info.boot_id)
            last = now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def complete(world: World, cr: str) -> bool:
    return world.cr_status(cr).get("status") == "complete"


def scenario(env: E2E, count: int, compliant: int, *, preflight: bool) -> str:
    with World(env) as world:
        nodes = world.add_nodes(count)
        half = nodes[:compliant]
        package = {"version": "1.0.0", "image": f"{EXEC_REGISTRY}/host-tuning"}
        for node in half:
            env.core.patch_node(node, {"metadata": {"labels": {HAS: "yes"}}})
        ctl = world.start_controller()
        seed = world.cr_name("seed")
        world.apply_cr(
            seed,
            {
                "nodeSelectors": {
                    "matchLabels": {**world.labels, "bench.nodewright.io/has": "yes"}
                },
                "interruptionBudget": {"count": len(half)},
                "packages": {"tune": package},
            },
        )
        wait_for(lambda: complete(world, seed), what="seed complete", timeout=600)
        world.custom.delete_cluster_custom_object(
            "bridge.nodewright.io", "v1alpha1", "nodewrights", seed
        )
        wait_for(lambda: world.cr_gone(seed), what="seed CR gone", timeout=120)
        ctl.stop()

        watch = Disruptions(world, nodes)
        cr = world.cr_name("tune")
        started = time.monotonic()
        world.apply_cr(
            cr,
            {
                "interruptionBudget": {"count": BATCH},
                "packages": {"tune": {**package, "preflight": preflight}},
            },
        )
        world.start_controller()
        wait_for(lambda: complete(world, cr), what="rollout complete", timeout=1200)
        took = time.monotonic() - started
        watch.stop()
        cordons = sum(watch.cordons.values())
        on_compliant = sum(watch.cordons[n] for n in half)
        reboots = sum(max(len(b) - 1, 0) for b in watch.boots.values())
        minutes = sum(watch.cordoned_seconds.values()) / 60
        for node in nodes:
            world.invariants.allow_reboots(node, 2, "the seed rollout and this one")
        label = "with preflight   " if preflight else "without preflight"
        return (
            f"{compliant:2d}/{count} compliant, {label}: {took:6.1f} s wall, cordons {cordons} "
            f"({on_compliant} on the {len(half)} compliant nodes), drains {cordons}, "
            f"reboots {reboots}, node-minutes cordoned {minutes:.2f}"
        )


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    lines = []
    runs = [(count // 2, False), (count // 2, True), (count, False), (count, True)]
    for compliant, preflight in runs:
        with tempfile.TemporaryDirectory(prefix="nwb-bench-pre-") as tmp:
            base = Path(tmp)
            runner = DispatchRunner(_package_dirs(base / "packages"))
            box = Sandbox(base / "sandbox", nodes=0, runner=runner, heartbeat_seconds=30.0)
            box.start()
            try:
                api = config.new_client_from_config(config_file=str(box.kubeconfig))
                ext = client.ApiextensionsV1Api(api)
                for path in sorted(CRDS.glob("*.yaml")):
                    ext.create_custom_resource_definition(yaml.safe_load(path.read_text()))
                time.sleep(2)
                client.CoreV1Api(api).create_namespace(
                    client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
                )
                env = E2E(box, api, runner)
                lines.append(scenario(env, count, compliant, preflight=preflight))
                print(lines[-1], flush=True)
            finally:
                box.stop()
    print(f"--- {count} exec nodes, batches of {BATCH}; all nodes share this machine's cores")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
