"""Where the API server is and how to prove who we are: kubeconfig files and in-cluster config.

Why our own loader: the official ``kubernetes`` client imports every generated model to load a
kubeconfig (about 14 MB of the controller's resident memory, which at 5,000 nodes is a tenth of
it). What a controller needs of a kubeconfig is small and is read here as ``kubectl`` reads it:

- ``$KUBECONFIG`` (or ``--kubeconfig``) may list several files (``:``-separated); they merge,
  and the first file that names a cluster, user or context, or sets ``current-context``, wins;
- relative file paths are relative to the kubeconfig that names them;
- cluster: ``server``, ``certificate-authority[-data]``, ``insecure-skip-tls-verify``,
  ``tls-server-name``, ``proxy-url``;
- user: ``client-certificate[-data]``, ``client-key[-data]``, ``token``, ``tokenFile`` and
  ``exec`` credential plugins (a token, cached until its ``expirationTimestamp``);
- in-cluster: the service account's token (re-read, since the kubelet rotates it), its CA, and
  ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``.

What is not supported fails with a message naming the field (``auth-provider``, basic auth, an
exec plugin that returns client certificates).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nodewright_bridge.errors import ConfigurationError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# A token file (service account, tokenFile) is read again after this long: the kubelet rotates a
# projected token well before it expires, and client-go re-reads on the same period.
TOKEN_FILE_REREAD_SECONDS = 60.0
# An exec plugin's token is used until this long before its expirationTimestamp.
EXEC_EXPIRY_MARGIN_SECONDS = 10.0
EXEC_TIMEOUT_SECONDS = 60.0


class Credentials:
    """The ``Authorization`` header of each request (None: the TLS client certificate, or none)."""

    def authorization(self) -> str | None:
        return None


@dataclass(slots=True)
class StaticToken(Credentials):
    token: str

    def authorization(self) -> str | None:
        return f"Bearer {self.token}"


@dataclass(slots=True)
class TokenFile(Credentials):
    """A token read from a file, again every :data:`TOKEN_FILE_REREAD_SECONDS`."""

    path: Path
    _token: str = ""
    _read_at: float = -1e9
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def authorization(self) -> str | None:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= TOKEN_FILE_REREAD_SECONDS or not self._token:
                try:
                    self._token = self.path.read_text().strip()
                except OSError as exc:
                    if not self._token:
                        raise ConfigurationError(
                            f"cannot read the token file {self.path}: {exc}"
                        ) from exc
                self._read_at = now
            return f"Bearer {self._token}"


@dataclass(slots=True)
class ExecPlugin(Credentials):
    """A client-go exec credential plugin: run it for a token, again when the token expires."""

    command: str
    args: Sequence[str]
    env: Mapping[str, str]
    api_version: str
    cluster: Mapping[str, Any] | None
    base_dir: Path
    _token: str = ""
    _expires: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def authorization(self) -> str | None:
        with self._lock:
            if not self._token or (
                self._expires is not None
                and time.time() >= self._expires - EXEC_EXPIRY_MARGIN_SECONDS
            ):
                self._token, self._expires = self._run()
            return f"Bearer {self._token}"

    def _run(self) -> tuple[str, float | None]:
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster is not None:
            spec["cluster"] = self.cluster
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        command = self.command
        if os.sep in command and not os.path.isabs(command):
            command = str(self.base_dir / command)
        try:
            done = subprocess.run(
                [command, *self.args],
                env={**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)},
                capture_output=True,
                timeout=EXEC_TIMEOUT_SECONDS,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigurationError(f"users[].user.exec: cannot run {command!r}: {exc}") from exc
        if done.returncode != 0:
            stderr = done.stderr.decode(errors="replace").strip()[-500:]
            raise ConfigurationError(
                f"users[].user.exec: {command!r} exited {done.returncode}: {stderr}"
            )
        try:
            status = json.loads(done.stdout)["status"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigurationError(
                f"users[].user.exec: {command!r} printed no ExecCredential with a status"
            ) from exc
        token = status.get("token") if isinstance(status, dict) else None
        if not token:
            raise ConfigurationError(
                f"users[].user.exec: {command!r} returned no status.token (client certificates "
                "from a plugin are not supported; use a plugin that returns a token)"
            )
        return str(token), _expiry(status.get("expirationTimestamp"))


@dataclass(frozen=True, slots=True)
class Connection:
    """Everything a transport needs: the server, TLS, a proxy and the credentials."""

    server: str
    tls: ssl.SSLContext | None
    tls_server_name: str | None = None
    proxy: str | None = None
    credentials: Credentials = field(default_factory=Credentials)
    source: str = ""


def load(kubeconfig: str | None, context: str | None) -> Connection:
    """In-cluster when no kubeconfig is named and ``KUBERNETES_SERVICE_HOST`` is set, else the
    named (or ``$KUBECONFIG``, else ``~/.kube/config``) kubeconfig.

    Raises:
        ConfigurationError: Nothing usable was found; the message names the file and field.
    """
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster()
    paths = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    return from_kubeconfig([p for p in paths.split(os.pathsep) if p], context)


def in_cluster(directory: Path = SERVICE_ACCOUNT_DIR) -> Connection:
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigurationError("in-cluster config: KUBERNETES_SERVICE_HOST is not set")
    token = directory / "token"
    if not token.is_file():
        raise ConfigurationError(f"in-cluster config: no service account token at {token}")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    ca = directory / "ca.crt"
    return Connection(
        server=f"https://{host}:{port}",
        tls=_tls_context(ca_file=str(ca) if ca.is_file() else None),
        credentials=TokenFile(token),
        proxy=_env_proxy(host.strip("[]"), https=True),
        source="in-cluster service account",
    )


def from_kubeconfig(paths: Sequence[str], context: str | None = None) -> Connection:
    merged = _merge(paths)
    source = os.pathsep.join(paths)
    name = context or merged.current_context
    if not name:
        raise ConfigurationError(f"{source}: no current-context, and no --context given")
    ctx = merged.contexts.get(name)
    if ctx is None:
        known = ", ".join(sorted(merged.contexts)) or "none"
        raise ConfigurationError(f"{source}: context {name!r} not found (contexts: {known})")
    cluster_name = str(ctx.body.get("cluster") or "")
    cluster = merged.clusters.get(cluster_name)
    if cluster is None:
        raise ConfigurationError(
            f"{ctx.path}: contexts[{name}].context.cluster {cluster_name!r} not found"
        )
    user_name = str(ctx.body.get("user") or "")
    user = merged.users.get(user_name) if user_name else _Entry(ctx.path, {})
    if user is None:
        raise ConfigurationError(
            f"{ctx.path}: contexts[{name}].context.user {user_name!r} not found"
        )
    return _connection(cluster, user, f"{source} (context {name})")


@dataclass(frozen=True, slots=True)
class _Entry:
    path: Path  # the kubeconfig that named it: relative paths are relative to its directory
    body: Mapping[str, Any]

    def file(self, key: str) -> str | None:
        value = self.body.get(key)
        if not value:
            return None
        path = Path(str(value)).expanduser()
        return str(path if path.is_absolute() else self.path.parent / path)

    def data(self, key: str) -> bytes | None:
        value = self.body.get(key)
        if not value:
            return None
        try:
            return base64.b64decode(str(value), validate=False)
        except ValueError as exc:
            raise ConfigurationError(f"{self.path}: {key} is not base64: {exc}") from exc


@dataclass(slots=True)
class _Merged:
    current_context: str = ""
    clusters: dict[str, _Entry] = field(default_factory=dict)
    users: dict[str, _Entry] = field(default_factory=dict)
    contexts: dict[str, _Entry] = field(default_factory=dict)


def _merge(paths: Sequence[str]) -> _Merged:
    merged = _Merged()
    read = 0
    for raw in paths:
        path = Path(raw).expanduser()
        try:
            text = path.read_text()
        except FileNotFoundError:
            if len(paths) == 1:
                raise ConfigurationError(f"kubeconfig {path} does not exist") from None
            continue  # kubectl skips missing files of a list
        except OSError as exc:
            raise ConfigurationError(f"cannot read kubeconfig {path}: {exc}") from exc
        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigurationError(f"kubeconfig {path} is not YAML: {exc}") from exc
        if not isinstance(doc, dict):
            raise ConfigurationError(f"kubeconfig {path} is not a mapping")
        read += 1
        if not merged.current_context and doc.get("current-context"):
            merged.current_context = str(doc["current-context"])
        for key, attr, into in (
            ("clusters", "cluster", merged.clusters),
            ("users", "user", merged.users),
            ("contexts", "context", merged.contexts),
        ):
            for index, item in enumerate(doc.get(key) or []):
                if not isinstance(item, dict) or not item.get("name"):
                    raise ConfigurationError(f"{path}: {key}[{index}] has no name")
                body = item.get(attr) or {}
                if not isinstance(body, dict):
                    raise ConfigurationError(
                        f"{path}: {key}[{item['name']}].{attr} is not a mapping"
                    )
                into.setdefault(str(item["name"]), _Entry(path, body))
    if not read:
        raise ConfigurationError(f"none of the kubeconfig files exists: {os.pathsep.join(paths)}")
    return merged


def _connection(cluster: _Entry, user: _Entry, source: str) -> Connection:
    server = str(cluster.body.get("server") or "")
    if not server.startswith(("https://", "http://")):
        raise ConfigurationError(f"{cluster.path}: clusters[].cluster.server {server!r} is no URL")
    for unsupported in ("auth-provider", "username", "password"):
        if user.body.get(unsupported):
            raise ConfigurationError(
                f"{user.path}: users[].user.{unsupported} is not supported; use a token, "
                "tokenFile, client certificate or exec plugin"
            )
    ca_data = cluster.data("certificate-authority-data")
    tls = None
    if server.startswith("https://"):
        with tempfile.TemporaryDirectory(prefix="nwb-tls-") as scratch:
            cert = user.file("client-certificate") or _scratch(
                scratch, "cert", user.data("client-certificate-data")
            )
            key = user.file("client-key") or _scratch(scratch, "key", user.data("client-key-data"))
            if bool(cert) != bool(key):
                raise ConfigurationError(
                    f"{user.path}: users[].user has a client certificate or key but not both"
                )
            tls = _tls_context(
                ca_file=cluster.file("certificate-authority"),
                ca_data=ca_data.decode("ascii", "replace") if ca_data else None,
                cert_file=cert,
                key_file=key,
                insecure=bool(cluster.body.get("insecure-skip-tls-verify")),
                where=f"{cluster.path} / {user.path}",
            )
    host = server.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return Connection(
        server=server,
        tls=tls,
        tls_server_name=str(cluster.body.get("tls-server-name") or "") or None,
        proxy=str(cluster.body.get("proxy-url") or "")
        or _env_proxy(host, https=server.startswith("https://")),
        credentials=_credentials(user, cluster),
        source=source,
    )


def _credentials(user: _Entry, cluster: _Entry) -> Credentials:
    if user.body.get("token"):
        return StaticToken(str(user.body["token"]))
    token_file = user.file("tokenFile")
    if token_file:
        return TokenFile(Path(token_file))
    spec = user.body.get("exec")
    if spec:
        if not isinstance(spec, dict) or not spec.get("command"):
            raise ConfigurationError(f"{user.path}: users[].user.exec.command is missing")
        env = {str(e.get("name")): str(e.get("value", "")) for e in spec.get("env") or []}
        cluster_info = None
        if spec.get("provideClusterInfo"):
            cluster_info = {
                k: v
                for k, v in {
                    "server": cluster.body.get("server"),
                    "tls-server-name": cluster.body.get("tls-server-name"),
                    "insecure-skip-tls-verify": cluster.body.get("insecure-skip-tls-verify"),
                    "certificate-authority-data": cluster.body.get("certificate-authority-data"),
                    "proxy-url": cluster.body.get("proxy-url"),
                }.items()
                if v
            }
        return ExecPlugin(
            command=str(spec["command"]),
            args=[str(a) for a in spec.get("args") or []],
            env=env,
            api_version=str(spec.get("apiVersion") or "client.authentication.k8s.io/v1"),
            cluster=cluster_info,
            base_dir=user.path.parent,
        )
    return Credentials()


def _scratch(directory: str, name: str, data: bytes | None) -> str | None:
    """Write certificate data where ``ssl`` can load it (the directory is gone once loaded)."""
    if data is None:
        return None
    path = Path(directory) / name
    path.write_bytes(data)
    path.chmod(0o600)
    return str(path)


def _tls_context(
    *,
    ca_file: str | None = None,
    ca_data: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    insecure: bool = False,
    where: str = "in-cluster config",
) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
        if cert_file:
            context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigurationError(f"{where}: cannot load the TLS files: {exc}") from exc
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _env_proxy(host: str, *, https: bool) -> str | None:
    """The proxy ``HTTPS_PROXY``/``HTTP_PROXY`` name for ``host``, unless ``NO_PROXY`` spares it."""
    env = os.environ
    proxy = (
        env.get("https_proxy") or env.get("HTTPS_PROXY")
        if https
        else env.get("http_proxy") or env.get("HTTP_PROXY")
    )
    if not proxy:
        return None
    for raw in (env.get("no_proxy") or env.get("NO_PROXY") or "").split(","):
        entry = raw.strip().lstrip(".")
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return None
    return proxy


def _expiry(stamp: object) -> float | None:
    if not stamp:
        return None
    try:
        when = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigurationError(
            f"users[].user.exec: expirationTimestamp {stamp!r} is not RFC 3339"
        ) from exc
    return when.timestamp()
