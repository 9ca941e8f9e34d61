"""Our kubeconfig and in-cluster loader, on real files, a real exec plugin and a real TLS server.

The TLS server is the standard library's, with certificates from the sandbox's own PKI: it asks
for a client certificate, so a kubeconfig's inlined certificate data is proven to reach the wire.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import ssl
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodewright_bridge.errors import ConfigurationError
from nodewright_bridge.k8s import kubeconfig, resources
from nodewright_bridge.k8s.client import ClientSettings, load_connection
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.sandbox.pki import Pki, make_pki


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def config(
    *,
    current: str = "",
    clusters: dict[str, dict[str, Any]] | None = None,
    users: dict[str, dict[str, Any]] | None = None,
    contexts: dict[str, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in (clusters or {}).items()],
        "users": [{"name": n, "user": u} for n, u in (users or {}).items()],
        "contexts": [
            {"name": n, "context": {"cluster": c, "user": u}}
            for n, (c, u) in (contexts or {}).items()
        ],
    }
    if current:
        doc["current-context"] = current
    return doc


def single(path: Path, cluster: dict[str, Any], user: dict[str, Any] | None = None) -> Path:
    """A kubeconfig of one cluster, one user and one current context."""
    users = {"u": user} if user is not None else {}
    context = ("c", "u" if user is not None else "")
    return write(
        path, config(current="x", clusters={"c": cluster}, users=users, contexts={"x": context})
    )


def test_a_kubeconfig_list_merges_with_the_first_file_winning(tmp_path: Path) -> None:
    first = write(
        tmp_path / "a" / "config",
        config(
            current="one",
            clusters={"c": {"server": "http://first:8080"}},
            users={"u": {"token": "from-first"}},
            contexts={"one": ("c", "u")},
        ),
    )
    second = write(
        tmp_path / "b" / "config",
        config(
            current="two",
            clusters={"c": {"server": "http://second:8080"}, "d": {"server": "http://d:1"}},
            users={"u": {"token": "from-second"}, "v": {"tokenFile": "token"}},
            contexts={"one": ("d", "v"), "two": ("d", "v")},
        ),
    )
    (tmp_path / "b" / "token").write_text("file-token\n")
    paths = [str(first), str(tmp_path / "missing"), str(second)]
    one = kubeconfig.from_kubeconfig(paths)
    assert one.server == "http://first:8080"
    assert one.credentials.authorization() == "Bearer from-first"
    two = kubeconfig.from_kubeconfig(paths, "two")
    assert two.server == "http://d:1"
    # tokenFile is relative to the kubeconfig that names it, not to the working directory
    assert two.credentials.authorization() == "Bearer file-token"


def test_kubeconfig_env_list_is_split_and_a_bad_context_names_the_known_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = write(
        tmp_path / "one",
        config(clusters={"c": {"server": "http://x:1"}}, contexts={"a": ("c", "")}),
    )
    two = write(tmp_path / "two", config(current="a", contexts={"b": ("c", "")}))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{one}{os.pathsep}{two}")
    assert kubeconfig.load(None, None).server == "http://x:1"
    with pytest.raises(ConfigurationError, match=r"context 'nope' not found \(contexts: a, b\)"):
        kubeconfig.load(None, "nope")


@pytest.mark.parametrize(
    ("user", "field"),
    [
        ({"auth-provider": {"name": "oidc"}}, "users[].user.auth-provider"),
        ({"username": "admin", "password": "x"}, "users[].user.username"),
        ({"exec": {"apiVersion": "client.authentication.k8s.io/v1"}}, "exec.command"),
    ],
)
def test_unsupported_or_broken_users_fail_naming_the_field(
    tmp_path: Path, user: dict[str, Any], field: str
) -> None:
    path = single(tmp_path / "config", {"server": "http://x:1"}, user)
    with pytest.raises(ConfigurationError, match=field.replace("[", r"\[").replace("]", r"\]")):
        kubeconfig.from_kubeconfig([str(path)])


def test_a_missing_kubeconfig_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_connection(ClientSettings(kubeconfig=str(tmp_path / "nope")))
    assert str(info.value) == (
        f"cannot load the cluster configuration: kubeconfig {tmp_path / 'nope'} does not exist"
    )


PLUGIN = """\
#!{python}
import json, os, sys, pathlib
calls = pathlib.Path(sys.argv[1])
calls.write_text(calls.read_text() + os.environ["KUBERNETES_EXEC_INFO"] + "\\n"
                 if calls.exists() else os.environ["KUBERNETES_EXEC_INFO"] + "\\n")
if os.environ.get("PLUGIN_FAIL"):
    print("login required", file=sys.stderr)
    sys.exit(3)
n = len(calls.read_text().splitlines())
print(json.dumps({{
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {{"token": f"{{os.environ['PREFIX']}}-{{n}}",
               "expirationTimestamp": sys.argv[2]}},
}}))
"""


def plugin_config(tmp_path: Path, expires: str) -> tuple[Path, Path]:
    script = tmp_path / "bin" / "get-token"
    script.parent.mkdir()
    script.write_text(PLUGIN.format(python=sys.executable))
    script.chmod(0o755)
    calls = tmp_path / "calls"
    exec_plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "bin/get-token",  # relative to the kubeconfig
        "args": [str(calls), expires],
        "env": [{"name": "PREFIX", "value": "tok"}],
        "provideClusterInfo": True,
        "interactiveMode": "Never",
    }
    path = single(tmp_path / "config", {"server": "http://api.example:6443"}, {"exec": exec_plugin})
    return path, calls


def test_an_exec_plugin_token_is_cached_until_it_expires(tmp_path: Path) -> None:
    path, calls = plugin_config(tmp_path, "2999-01-01T00:00:00Z")
    credentials = kubeconfig.from_kubeconfig([str(path)]).credentials
    assert credentials.authorization() == "Bearer tok-1"
    assert credentials.authorization() == "Bearer tok-1"
    (info,) = [json.loads(line) for line in calls.read_text().splitlines()]
    assert info["kind"] == "ExecCredential"
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == "http://api.example:6443"


def test_an_expired_exec_token_runs_the_plugin_again(tmp_path: Path) -> None:
    path, calls = plugin_config(tmp_path, "2001-01-01T00:00:00Z")
    credentials = kubeconfig.from_kubeconfig([str(path)]).credentials
    assert credentials.authorization() == "Bearer tok-1"
    assert credentials.authorization() == "Bearer tok-2"
    assert len(calls.read_text().splitlines()) == 2


def test_a_failing_exec_plugin_says_what_it_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = plugin_config(tmp_path, "2999-01-01T00:00:00Z")
    monkeypatch.setenv("PLUGIN_FAIL", "1")
    with pytest.raises(ConfigurationError, match="exited 3: login required"):
        load_connection(ClientSettings(kubeconfig=str(path)))


def test_in_cluster_reads_the_service_account_and_rereads_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = make_pki(tmp_path / "pki")
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("first")
    (sa / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    monkeypatch.setattr(kubeconfig, "TOKEN_FILE_REREAD_SECONDS", 0.0)
    connection = kubeconfig.in_cluster(sa)
    assert connection.server == "https://10.0.0.1:6443"
    assert connection.tls is not None
    assert connection.tls.verify_mode is ssl.CERT_REQUIRED
    assert connection.credentials.authorization() == "Bearer first"
    (sa / "token").write_text("rotated")
    assert connection.credentials.authorization() == "Bearer rotated"


def test_proxies_come_from_the_environment_unless_no_proxy_spares_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = single(tmp_path / "config", {"server": "https://api.corp.example:6443"})
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert kubeconfig.from_kubeconfig([str(path)]).proxy == "http://proxy:3128"
    monkeypatch.setenv("NO_PROXY", "localhost,.corp.example")
    assert kubeconfig.from_kubeconfig([str(path)]).proxy is None


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers any GET with the client certificate's common name and the Authorization header."""

    def do_GET(self) -> None:
        peer = self.connection.getpeercert()  # type: ignore[attr-defined]
        subject = dict(pair[0] for pair in (peer or {}).get("subject", ()))
        body = json.dumps(
            {"cn": subject.get("commonName"), "auth": self.headers.get("Authorization")}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[Pki, int]]:
    pki = make_pki(tmp_path / "pki")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    context.verify_mode = ssl.CERT_REQUIRED
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield pki, server.server_address[1]
    server.shutdown()
    server.server_close()


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def test_inlined_ca_and_client_certificate_reach_a_real_tls_server(
    tls_server: tuple[Pki, int], tmp_path: Path
) -> None:
    pki, port = tls_server
    client = pki.client("alice", ["team"])
    cluster = {
        "server": f"https://127.0.0.1:{port}",
        "certificate-authority-data": b64(pki.ca_cert),
    }
    user = {"client-certificate-data": b64(client.cert), "client-key-data": b64(client.key)}
    path = single(tmp_path / "config", cluster, user)
    rest = Rest(load_connection(ClientSettings(kubeconfig=str(path))))
    assert rest.get(resources.NODES, "n") == {"cn": "alice", "auth": None}
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("nwb-tls-*"))


def test_tls_server_name_and_a_wrong_ca_are_checked(
    tls_server: tuple[Pki, int], tmp_path: Path
) -> None:
    pki, port = tls_server
    other = make_pki(tmp_path / "other")
    cluster = {"server": f"https://127.0.0.1:{port}", "certificate-authority": str(other.ca_cert)}
    client = pki.client("bob")
    user = {"client-certificate": str(client.cert), "client-key": str(client.key), "token": "t"}
    path = single(tmp_path / "config", cluster, user)
    from nodewright_bridge.errors import UnreachableError  # noqa: PLC0415

    with pytest.raises(UnreachableError, match="certificate verify failed"):
        Rest(load_connection(ClientSettings(kubeconfig=str(path)))).get(resources.NODES, "n")
    cluster["certificate-authority"] = str(pki.ca_cert)
    cluster["tls-server-name"] = "kubernetes.default.svc"
    single(path, cluster, user)
    answer = Rest(load_connection(ClientSettings(kubeconfig=str(path)))).get(resources.NODES, "n")
    assert answer == {"cn": "bob", "auth": "Bearer t"}


def test_the_controller_process_never_imports_the_kubernetes_client() -> None:
    """The official client is ~10 MB of resident memory the controller does not need."""
    code = textwrap.dedent(
        """
        import sys
        import nodewright_bridge.commands.controller
        import nodewright_bridge.commands.logs
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("kubernetes", "urllib3"))
        print(",".join(loaded))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
