"""Benchmark: nwb-agent overhead per stage versus plain ansible-playbook on the same role.

Run as root: ``.venv/bin/python tests/bench/bench_agent.py [ROLE_DIR] [--repeat N]``.
Both sides run under the same per-node isolation against the same copy-on-write node root, with
the same connection (community.general.chroot), the same fact gathering and the same role:

- plain:  ``ansible-playbook`` of a one-play playbook (``include_role`` + ``tasks_from``), one
          process per stage, as a team would script it;
- agent:  ``nwb-agent run --stages ...`` (one ansible-playbook process for all stages, event
          handling, JSONL logs, result).

Prints the median wall time of each and the ratio agent/plain, for one stage and for two stages.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from nodewright_bridge.sandbox import isolation, roletesting, rootfs

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ROLE = REPO / "examples" / "roles" / "sysctl-tuning"
VENV_BIN = Path(sys.executable).parent


def plain_run(root: Path, state: Path, role: Path, tasks_from: str, work: Path) -> float:
    play = [
        {
            "hosts": "all",
            "gather_facts": True,
            "tasks": [
                {"ansible.builtin.include_role": {"name": str(role), "tasks_from": tasks_from}}
            ],
        }
    ]
    (work / "site.yml").write_text(yaml.safe_dump(play))
    inventory = {
        "all": {
            "hosts": {
                "node": {
                    "ansible_connection": "community.general.chroot",
                    "ansible_host": str(root),
                    "ansible_python_interpreter": "/usr/bin/python3",
                }
            }
        }
    }
    (work / "inventory.json").write_text(json.dumps(inventory))
    env = {
        "PATH": f"{VENV_BIN}:{roletesting.BASE_PATH}",
        "LANG": "C.UTF-8",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_NOCOLOR": "1",
    }
    argv = ["ansible-playbook", "-i", str(work / "inventory.json"), str(work / "site.yml")]
    started = time.monotonic()
    proc = isolation.run_isolated(
        root, state, argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, err = proc.communicate(timeout=600)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"plain ansible-playbook failed: {err.decode()[-500:]}")
    return elapsed


def agent_run(root: Path, state: Path, role: Path, stages: str) -> float:
    started = time.monotonic()
    run = roletesting.run_stages(role, root, stages, state=state, capture=True)
    elapsed = time.monotonic() - started
    if run.exit_code != 0:
        raise SystemExit(f"agent failed: {run.output[-800:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", nargs="?", type=Path, default=DEFAULT_ROLE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    role: Path = args.role.resolve()
    checks = next(
        f for f in ("verify.yml", "check.yml", "validate.yml") if (role / "tasks" / f).is_file()
    )
    base = rootfs.ensure_base_rootfs()
    work = Path(tempfile.mkdtemp(prefix="nwb-bench-"))
    node = rootfs.mount_node_root(base, work / "node")
    state = work / "state"
    isolation.prepare_node(node.path, state, "bench-boot")
    try:
        # Warm caches (page cache, pyc) on both sides before measuring.
        plain_run(node.path, state, role, "main.yml", work)
        agent_run(node.path, state, role, "apply")
        plain1, agent1, plain2, agent2 = [], [], [], []
        for _ in range(args.repeat):
            plain1.append(plain_run(node.path, state, role, "main.yml", work))
            agent1.append(agent_run(node.path, state, role, "apply"))
            plain2.append(
                plain_run(node.path, state, role, "main.yml", work)
                + plain_run(node.path, state, role, checks, work)
            )
            agent2.append(agent_run(node.path, state, role, "apply,apply-check"))
    finally:
        isolation.release_node(node.path, state)
        rootfs.unmount_node_root(node, remove=True)
        shutil.rmtree(work, ignore_errors=True)

    def report(label: str, plain: list[float], agent: list[float]) -> None:
        p, a = statistics.median(plain), statistics.median(agent)
        print(
            f"{label:<28} plain {p:6.2f}s   agent {a:6.2f}s   "
            f"ratio {a / p:4.2f}x   overhead {a - p:+.2f}s"
        )

    print(f"role {role.name}, median of {args.repeat} runs (after one warm-up)")
    report("apply (1 stage)", plain1, agent1)
    report("apply + apply-check (2)", plain2, agent2)


if __name__ == "__main__":
    main()
