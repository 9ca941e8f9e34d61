"""The chart's RBAC is enough for a whole rollout, and the collection drives one end to end.

The chart is installed into the e2e sandbox (its namespace ``nodewright-system`` already exists,
so ``createNamespace=false``; the controller Deployment's pods are kept off the test nodes - the
shared e2e kubelet simulates workload pods; ``test_controller_pod.py`` runs the image). ``nwb
controller`` then runs as a
local process with a TokenRequest token of the chart's ServiceAccount, i.e. as
``system:serviceaccount:nodewright-system:<release>-nodewright-bridge``, while real
``ansible-playbook`` plays the collection's ``rollout_controller`` target: a rollout of the
example sysctl-tuning package waited on to Ready (real agent, exec mode), and a rollout whose
verify fails, which must fail its task with the controller's message.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from chart_support import Controller, Helm, service_account_kubeconfig
from e2e_harness import E2E, EXEC_REGISTRY, NAMESPACE, World, wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from playbook_support import play_target

pytestmark = pytest.mark.e2e

LEASE = "nodewright-bridge-controller"


@dataclass(frozen=True)
class ChartController:
    release: str
    account: str
    controller: Controller


@pytest.fixture(scope="module")
def chart_controller(
    e2e: E2E, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartController]:
    tmp = tmp_path_factory.mktemp("chart-controller")
    helm = Helm(e2e.kubeconfig, tmp / "helm-home")
    release = f"nwb-{uuid.uuid4().hex[:6]}"
    helm.install(
        release,
        f"namespace={NAMESPACE}",
        "createNamespace=false",
        "replicaCount=1",
        "podDisruptionBudget.enabled=false",
        "nodeSelector.nodewright-bridge-chart-test=no-such-node",
        wait=False,
    )
    account = f"{release}-nodewright-bridge"
    try:
        kubeconfig = service_account_kubeconfig(
            e2e.api, e2e.kubeconfig, NAMESPACE, account, tmp / "sa.kubeconfig"
        )
        with Controller(kubeconfig, NAMESPACE, tmp / "controller.log", identity=account) as ctl:
            yield ChartController(release, account, ctl)
    finally:
        helm.run("uninstall", release, "--wait", check=False)


def _lease_holder(e2e: E2E) -> str:
    try:
        lease = e2e.coordination.read_namespaced_lease(LEASE, NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return lease.spec.holder_identity or ""


def test_a_playbook_rolls_out_a_package_to_ready_and_a_failing_verify_fails_its_task_under_the_chart_rbac(  # noqa: E501
    chart_controller: ChartController, world: World, tmp_path: Path
) -> None:
    ok_nodes = world.add_nodes(2, labels={"nwb-collection": "ok"}, prefix="ok")
    world.add_nodes(1, labels={"nwb-collection": "fail"}, prefix="fail")
    # A workload on the ok nodes: the package's interrupt makes the controller drain its node,
    # which it may only do through the Eviction API (pods/eviction), under the chart RBAC.
    namespace = world.namespace()
    labels = {"app": "workload"}
    replica_set = client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name="workload", namespace=namespace),
        spec=client.V1ReplicaSetSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    node_selector={"nwb-collection": "ok"},
                    containers=[client.V1Container(name="main", image="registry.invalid/app:1")],
                ),
            ),
        ),
    )
    client.AppsV1Api(world.env.api).create_namespaced_replica_set(namespace, replica_set)

    def running_workload() -> str:
        pods = world.core.list_namespaced_pod(namespace, label_selector="app=workload").items
        running = [p.metadata.name for p in pods if p.status.phase == "Running"]
        return running[0] if running else ""

    first_workload = wait_for(running_workload, timeout=60, what="workload pod running")
    ctl = chart_controller.controller
    wait_for(
        lambda: _lease_holder(world.env).startswith(chart_controller.account),
        timeout=90,
        what="the controller running as the chart ServiceAccount leads",
    )
    play = play_target(
        "rollout_controller",
        world.env.kubeconfig,
        tmp_path,
        {
            "nwb_prefix": f"it-{world.id}",
            "nwb_exec_registry": EXEC_REGISTRY,
            "nwb_host_connection": "chroot",
            "nwb_ok_selector": {**world.labels, "nwb-collection": "ok"},
            "nwb_fail_selector": {**world.labels, "nwb-collection": "fail"},
            "nwb_ok_node_count": len(ok_nodes),
            "nwb_ok_interrupt": {"type": "service", "services": ["chrony"]},
        },
    )
    assert play.proc.returncode == 0, play.output + "\n--- controller log:\n" + ctl.log_text()
    recap = play.recap()
    assert recap["failed"] == 0 and recap["rescued"] == 1, play.output
    # What a user sees: the failing task by name, and the controller's message naming the role task.
    fatal = play.output.split("TASK [rollout_controller : Roll out the probe with a verify")[1]
    fatal = fatal.split("TASK [")[0]
    assert "fatal: [localhost]: FAILED!" in fatal
    assert "The probe verifies" in fatal and "probe verify failed on purpose" in fatal
    # The real package ran on each node's root.
    kubelet = world.env.box.kubelet
    assert kubelet is not None
    for name in ok_nodes:
        root = kubelet.nodes[name].root_dir
        assert root is not None
        assert "vm.swappiness=17" in (root / "etc/sysctl.d/90-node-tuning.conf").read_text()
    # The drain evicted the workload (its ReplicaSet made a new pod) and uncordoned the nodes.
    names = [p.metadata.name for p in world.core.list_namespaced_pod(namespace).items]
    assert first_workload not in names
    assert not any(world.node(name).spec.unschedulable for name in ok_nodes)
    # The chart's RBAC was enough: the controller never got a 403 and is still leading.
    assert ctl.running(), ctl.log_text()
    assert ctl.forbidden() == [], "\n".join(ctl.forbidden()[:20])
    assert _lease_holder(world.env).startswith(chart_controller.account)
