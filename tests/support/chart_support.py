"""Helpers for tests that install the Helm chart and act as its ServiceAccount.

- ``Helm``: the real ``helm`` binary (built by ``make setup``) against the sandbox, with its own
  cache/config directories so tests never touch the user's.
- ``service_account_kubeconfig``: a kubeconfig holding a TokenRequest token of a ServiceAccount,
  i.e. exactly the credentials a controller pod of the chart would get.
- ``can_i``: a SelfSubjectAccessReview made *with* those credentials.
- ``Controller``: ``nwb controller`` as a local process (the shared sandboxes simulate workload
  pods; ``tests/e2e/test_controller_pod.py`` runs the image), logging JSON to a file the test
  can read.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import yaml
from kubernetes import client
from waiting import wait_for

from nodewright_bridge.sandbox import binaries

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "nodewright-bridge"
CHART_CRDS = CHART / "crds"
# The sandbox's kube-apiserver issues and accepts tokens for its --service-account-issuer.
TOKEN_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
HELM_TIMEOUT = "120s"
# An HTTP 403 in a log line, as a number of its own (a port such as 40315 is not one).
_HTTP_403 = re.compile(r"(?<![\w.-])403(?![\w.-])")  # not inside a uuid, a version or a number


def helm_binary() -> str:
    found = binaries.find("helm")
    if found is None:
        pytest.fail("helm not found: `make setup` builds it into ~/.cache/nodewright-bridge/bin")
    return str(found.path)


class Helm:
    """``helm`` with ``--kubeconfig`` and private XDG directories."""

    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.binary = helm_binary()
        self.kubeconfig = kubeconfig
        home.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [self.binary, *args, "--kubeconfig", str(self.kubeconfig)]
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args[:2])} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def install(
        self, release: str, *sets: str, wait: bool = True
    ) -> subprocess.CompletedProcess[str]:
        args = ["install", release, str(CHART), "--timeout", HELM_TIMEOUT]
        if wait:
            args.append("--wait")
        for value in sets:
            args += ["--set", value]
        return self.run(*args)

    def upgrade(self, release: str, *sets: str) -> subprocess.CompletedProcess[str]:
        args = ["upgrade", release, str(CHART), "--wait", "--timeout", HELM_TIMEOUT]
        for value in sets:
            args += ["--set", value]
        return self.run(*args)

    def uninstall(self, release: str) -> subprocess.CompletedProcess[str]:
        return self.run("uninstall", release, "--wait", "--timeout", HELM_TIMEOUT)

    def manifest(self, release: str) -> list[dict[str, Any]]:
        text = self.run("get", "manifest", release).stdout
        return [doc for doc in yaml.safe_load_all(text) if doc]


def service_account_kubeconfig(
    admin: client.ApiClient,
    admin_kubeconfig: Path,
    namespace: str,
    account: str,
    path: Path,
    *,
    expiration_seconds: int = 3600,
) -> Path:
    """Write a kubeconfig authenticating as ``system:serviceaccount:<namespace>:<account>``."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[TOKEN_AUDIENCE], expiration_seconds=expiration_seconds
        )
    )
    issued = client.CoreV1Api(admin).create_namespaced_service_account_token(
        account, namespace, request
    )
    source = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = source["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sandbox", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": issued.status.token}}],
        "contexts": [{"name": account, "context": {"cluster": "sandbox", "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def can_i(
    api: client.ApiClient,
    verb: str,
    resource: str,
    *,
    group: str = "",
    namespace: str = "",
    subresource: str = "",
) -> bool:
    """Whether the identity behind ``api`` may make this request (SelfSubjectAccessReview)."""
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb,
                resource=resource,
                group=group,
                namespace=namespace or None,
                subresource=subresource or None,
            )
        )
    )
    result = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(result.status.allowed)


class Controller:
    """``nwb controller`` run locally; JSON logs go to ``log_path``."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        log_path: Path,
        *,
        reconciler_script: Path | None = None,
        identity: str = "chart-test",
    ) -> None:
        self.log_path = log_path
        # ``nwb controller``, or the same command around a test reconciler (``reconciler_script``).
        head = (
            [sys.executable, str(reconciler_script)]
            if reconciler_script
            else [
                str(Path(sys.executable).parent / "nwb"),
                "controller",
            ]
        )
        argv = [
            *head,
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            namespace,
            "--metrics-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ]
        self.argv = argv
        self.env = {**os.environ, "POD_NAME": identity}
        self.env.pop("KUBECONFIG", None)
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Controller:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def forbidden(self) -> list[str]:
        """Log lines that report an RBAC refusal (HTTP 403 / "forbidden")."""
        return [
            line
            for line in self.log_text().splitlines()
            if "forbidden" in line.lower() or _HTTP_403.search(line)
        ]


def ensure_crds(api: client.ApiClient, timeout: float = 60.0) -> None:
    """Create the chart's CRDs (or bring them up to date) and wait until they are Established."""
    ext = client.ApiextensionsV1Api(api)
    for path in sorted(CHART_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        try:
            ext.create_custom_resource_definition(crd)
        except client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise
            current = ext.read_custom_resource_definition(name)
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, crd)

        def established(name: str = name) -> bool:
            live = ext.read_custom_resource_definition(name)
            return any(
                c.type == "Established" and c.status == "True" for c in live.status.conditions or []
            )

        wait_for(established, timeout=timeout, what=f"CRD {name} Established")
