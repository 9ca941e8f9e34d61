"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1.

Every component listens on loopback on a free port; state, certificates, kubeconfigs and one log
per process live in one directory. ``start()`` brings them up in order and waits until each is
usable; ``stop()`` stops them in reverse order. Children never outlive us (see ``processes``).

Choices (verified against v1.36.3):
- The ServiceAccount admission plugin stays on, so pods look as on a real cluster (the Helm chart
  of the controller needs its ServiceAccount and token). Hence KCM runs the serviceaccount,
  serviceaccount-token and root-ca-certificate-publisher controllers with the SA private key and CA.
- No ``--advertise-address`` (loopback is rejected) and ``--endpoint-reconciler-type=none``; if
  the apiserver cannot find a non-loopback address to advertise, we retry with a fixed documentary
  address it only writes into its own records.
- No node-lifecycle-controller: simulated nodes need not renew Leases; the kubelet still
  heartbeats conditions at a modest rate.
- The workload controllers a drain meets run (ReplicaSet, Deployment, DaemonSet, Job, disruption
  for PodDisruptionBudget status), so evictions, budgets and DaemonSet pods behave as on a cluster.

``restart_apiserver()`` stops kube-apiserver (gracefully or with SIGKILL) and starts it again on
the same port with the same etcd, certificates and arguments, as an upgrade or a crash of a real
control plane's API server would: every client (the controller, the simulated kubelet, KCM, the
scheduler) keeps running and must reconnect on its own; nothing stored is lost.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nodewright_bridge.sandbox import pki as pki_mod
from nodewright_bridge.sandbox.binaries import Binary
from nodewright_bridge.sandbox.processes import ManagedProcess, free_port, wait_until

log = logging.getLogger(__name__)

SERVICE_CIDR = "10.0.0.0/24"
# Enough for the drain/PDB/rollout/namespace paths the product uses, plus what pods need to be
# admitted (service accounts, their tokens and the kube-root-ca.crt ConfigMap).
CONTROLLERS = (
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "disruption-controller",
    "replicaset-controller",
    "deployment-controller",
    "daemonset-controller",  # DaemonSet pods on the nodes, as drains meet them (ignoreDaemonSets)
    "garbage-collector-controller",
    "namespace-controller",
    "job-controller",
    "pod-garbage-collector-controller",
)
# Observed on 2 cores: etcd < 1 s, apiserver 5-15 s, KCM/scheduler a few s; generous for a busy CI.
START_TIMEOUT_SECONDS = 120.0
# The Go garbage collector's target for every component (unless GOGC is set): the sandbox shares
# two cores between etcd, the API server, the controllers, the simulated kubelet and the tests,
# and at the default (100) the API server spends a sixth of a busy rollout collecting garbage.
# Memory is plentiful; GC time is not.
GOGC = "400"
# Address the apiserver advertises when the host has no non-loopback address (TEST-NET-1, unused).
FALLBACK_ADVERTISE_ADDRESS = "192.0.2.10"

Progress = Callable[[str], None]


@dataclass
class ControlPlane:
    """A control plane rooted at ``directory``; use ``start()``/``stop()`` or as a context."""

    directory: Path
    binaries: dict[str, Binary]
    etcd_port: int = 0
    apiserver_port: int = 0
    processes: list[ManagedProcess] = field(default_factory=list)
    pki: pki_mod.Pki | None = None
    timings: dict[str, float] = field(default_factory=dict)
    # Added to kube-apiserver's flags (the kubelet tier's --egress-selector-config-file).
    extra_apiserver_args: list[str] = field(default_factory=list)
    # Run besides CONTROLLERS (the kubelet tier's real nodes want node-lifecycle-controller).
    extra_controllers: list[str] = field(default_factory=list)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, progress: Progress | None = None) -> None:
        say = progress or (lambda text: None)
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            began = time.monotonic()
            say("certificates")
            self.pki = pki_mod.make_pki(self.directory / "pki")
            self._timed("pki", began)
            say("etcd")
            self._start_etcd()
            say("kube-apiserver")
            self._start_apiserver()
            admin = self.pki.admin_token
            pki_mod.write_kubeconfig(self.kubeconfig, self.server, self.pki.ca_cert, admin)
            say("kube-controller-manager")
            self._start_controller_manager()
            say("kube-scheduler")
            self._start_scheduler()
            self._timed("total", began)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component in reverse start order."""
        while self.processes:
            proc = self.processes.pop()
            code = proc.stop()
            log.info("stopped %s (exit %s)", proc.name, code)

    def wipe(self) -> None:
        """Remove the directory (after stop)."""
        shutil.rmtree(self.directory, ignore_errors=True)

    # --- components -------------------------------------------------------------------------

    def _timed(self, what: str, began: float) -> None:
        self.timings[what] = round(time.monotonic() - began, 2)

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        proc = self._process(name, argv)
        self.processes.append(proc)
        return proc

    def _process(self, name: str, argv: list[str]) -> ManagedProcess:
        env = {**os.environ, "GOGC": os.environ.get("GOGC", GOGC)}
        return ManagedProcess(name, argv, log_path=self.log_dir / f"{name}.log", env=env)

    def _wait(self, proc: ManagedProcess, check: Callable[[], object], what: str) -> None:
        def ready() -> object:
            if not proc.alive():
                raise ComponentError(proc)
            return check()

        try:
            wait_until(ready, timeout=START_TIMEOUT_SECONDS, what=what)
        except ComponentError:
            raise
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}\n--- {proc.name} log tail ---\n{proc.log_tail()}") from exc

    def _start_etcd(self) -> None:
        began = time.monotonic()
        self.etcd_port, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        proc = self._spawn(
            "etcd",
            [
                str(self.binaries["etcd"].path),
                "--name=sandbox",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=sandbox={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client_url}/health", timeout=2) as resp:
                return bool(json.load(resp).get("health") == "true")

        self._wait(proc, healthy, "etcd /health")
        self._timed("etcd", began)

    def _apiserver_argv(self, advertise: str | None) -> list[str]:
        assert self.pki is not None
        argv = [
            str(self.binaries["kube-apiserver"].path),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={self.pki.server_cert}",
            f"--tls-private-key-file={self.pki.server_key}",
            f"--client-ca-file={self.pki.ca_cert}",
            f"--token-auth-file={self.pki.token_file}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--profiling=false",
            f"--cert-dir={self.directory / 'apiserver-certs'}",
        ]
        if advertise:
            argv.append(f"--advertise-address={advertise}")
        return argv + self.extra_apiserver_args

    def _apiserver_ready(self) -> Callable[[], bool]:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))

        def ready() -> bool:
            url = f"{self.server}/readyz"
            with urllib.request.urlopen(url, timeout=5, context=context) as resp:
                return bool(resp.status == 200)

        return ready

    def _start_apiserver(self) -> None:
        began = time.monotonic()
        ready = self._apiserver_ready()
        for advertise in (None, FALLBACK_ADVERTISE_ADDRESS):
            self.apiserver_port = free_port()
            proc = self._spawn("kube-apiserver", self._apiserver_argv(advertise))
            try:
                self._wait(proc, ready, "kube-apiserver /readyz")
                break
            except ComponentError:
                if advertise is None and "suitable network address" in proc.log_tail(60):
                    log.warning("no non-loopback address; retrying with --advertise-address")
                    self.processes.remove(proc)
                    proc.stop()
                    continue
                raise
        self._timed("kube-apiserver", began)

    def restart_apiserver(self, *, down_seconds: float = 0.0, crash: bool = False) -> float:
        """Stop kube-apiserver, wait ``down_seconds``, start it again in place; block until ready.

        In place: the same port, etcd, certificates and arguments (so kubeconfigs stay valid and
        nothing stored is lost). ``crash``: SIGKILL instead of SIGTERM (no graceful shutdown, open
        watches and requests cut off). Returns the seconds the API was unavailable.

        Call it from a long-lived thread (normally the main one): the new process dies with the
        thread that starts it (``processes``, PR_SET_PDEATHSIG).
        """
        index, old = next(
            (i, p) for i, p in enumerate(self.processes) if p.name == "kube-apiserver"
        )
        began = time.monotonic()
        old.stop(graceful=not crash)
        log.info(
            "kube-apiserver stopped (%s); restarting on port %d",
            old.popen.returncode,
            self.apiserver_port,
        )
        if down_seconds > 0:
            time.sleep(down_seconds)
        proc = self._process(old.name, old.argv)
        self.processes[index] = proc
        self._wait(proc, self._apiserver_ready(), "kube-apiserver /readyz after a restart")
        return round(time.monotonic() - began, 2)

    def _secure_healthz(self, port: int) -> Callable[[], bool]:
        # KCM and the scheduler serve self-signed certs; /healthz is an always-allowed path.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE

        def healthy() -> bool:
            url = f"https://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                return bool(resp.status == 200)

        return healthy

    def _start_controller_manager(self) -> None:
        began = time.monotonic()
        assert self.pki is not None
        port = free_port()
        kubeconfig = str(self.kubeconfig)
        proc = self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries["kube-controller-manager"].path),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--controllers={','.join((*CONTROLLERS, *self.extra_controllers))}",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.directory / 'kcm-certs'}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--profiling=false",
            ],
        )
        self._wait(proc, self._secure_healthz(port), "kube-controller-manager /healthz")
        self._timed("kube-controller-manager", began)

    def _start_scheduler(self) -> None:
        began = time.monotonic()
        port = free_port()
        kubeconfig = str(self.kubeconfig)
        proc = self._spawn(
            "kube-scheduler",
            [
                str(self.binaries["kube-scheduler"].path),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.directory / 'scheduler-certs'}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--profiling=false",
            ],
        )
        self._wait(proc, self._secure_healthz(port), "kube-scheduler /healthz")
        self._timed("kube-scheduler", began)


class ComponentError(RuntimeError):
    """A control-plane process exited while starting."""

    def __init__(self, proc: ManagedProcess) -> None:
        super().__init__(
            f"{proc.name} exited with code {proc.popen.returncode} while starting"
            f"\n--- {proc.name} log tail ({proc.log_path}) ---\n{proc.log_tail()}"
        )
        self.proc = proc
