"""Turning a pod's env and volumes into host-side values and directories (for real runners).

Simulate mode never calls this (``ContainerRunner.materializes`` is False there): it costs API
reads per pod. For exec/podman it does what a kubelet's volume manager and env resolution do, in
their simplest form:
- ConfigMap, Secret, emptyDir, downwardAPI and projected volumes become directories under
  ``<node state_dir>/pods/<uid>/volumes/<name>`` (keys as files; ``items`` honoured);
  projected serviceAccountToken sources get a real token from the TokenRequest API;
- env: literal values, ``valueFrom`` (fieldRef, configMapKeyRef, secretKeyRef, resourceFieldRef)
  and ``envFrom``; ``$(VAR)`` references are expanded as the kubelet does.
Missing optional sources are skipped; a missing required one raises ``ContainerStartError``
(the pod then fails to start with reason CreateContainerConfigError).
"""

from __future__ import annotations

import base64
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodewright_bridge.sandbox.kubelet.api import ApiError, Obj, RawApi
from nodewright_bridge.sandbox.kubelet.runners import ContainerStartError, VolumeKind, VolumeMount

CONFIG_ERROR = "CreateContainerConfigError"
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def pod_dir(state_dir: Path, uid: str) -> Path:
    return state_dir / "pods" / uid


def _config_error(message: str) -> ContainerStartError:
    return ContainerStartError(message, reason=CONFIG_ERROR, exit_code=128)


class Materializer:
    """Reads what a pod references from the API and writes it to the pod's directory."""

    def __init__(self, api: RawApi) -> None:
        self.api = api

    # --- lookups --------------------------------------------------------------------------

    def _object(self, kind: str, namespace: str, name: str, *, optional: bool) -> Obj | None:
        path = f"/api/v1/namespaces/{namespace}/{kind}/{name}"
        found = self.api.get(path, ok_missing=True)
        if found is None and not optional:
            raise _config_error(f"{kind[:-1]} {namespace}/{name} not found")
        return found

    def _data(self, kind: str, namespace: str, name: str, *, optional: bool) -> dict[str, bytes]:
        found = self._object(kind, namespace, name, optional=optional)
        if found is None:
            return {}
        out: dict[str, bytes] = {}
        if kind == "secrets":
            for key, value in (found.get("data") or {}).items():
                out[key] = base64.b64decode(value)
        else:
            for key, value in (found.get("data") or {}).items():
                out[key] = str(value).encode()
            for key, value in (found.get("binaryData") or {}).items():
                out[key] = base64.b64decode(value)
        return out

    # --- env ------------------------------------------------------------------------------

    def env(self, pod: Obj, container: Obj, *, host_ip: str, pod_ip: str) -> dict[str, str]:
        namespace = pod["metadata"]["namespace"]
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                ref = source["configMapRef"]
                data = self._data(
                    "configmaps", namespace, ref["name"], optional=bool(ref.get("optional"))
                )
            elif "secretRef" in source:
                ref = source["secretRef"]
                data = self._data(
                    "secrets", namespace, ref["name"], optional=bool(ref.get("optional"))
                )
            else:
                continue
            for key, raw in data.items():
                env[prefix + key] = raw.decode(errors="replace")
        for item in container.get("env") or []:
            name = item["name"]
            if "valueFrom" in item:
                value = self._value_from(pod, container, item["valueFrom"], host_ip, pod_ip)
                if value is None:
                    continue
                env[name] = value
            else:
                env[name] = expand(item.get("value", ""), env)
        return env

    def _value_from(
        self, pod: Obj, container: Obj, source: Obj, host_ip: str, pod_ip: str
    ) -> str | None:
        namespace = pod["metadata"]["namespace"]
        if "fieldRef" in source:
            return field_value(pod, source["fieldRef"]["fieldPath"], host_ip, pod_ip)
        if "configMapKeyRef" in source or "secretKeyRef" in source:
            kind = "configmaps" if "configMapKeyRef" in source else "secrets"
            ref = source.get("configMapKeyRef") or source["secretKeyRef"]
            optional = bool(ref.get("optional"))
            data = self._data(kind, namespace, ref["name"], optional=optional)
            if ref["key"] not in data:
                if optional:
                    return None
                raise _config_error(f"key {ref['key']} not in {kind[:-1]} {ref['name']}")
            return data[ref["key"]].decode(errors="replace")
        if "resourceFieldRef" in source:
            resource = source["resourceFieldRef"]["resource"]  # e.g. limits.cpu
            section, _, name = resource.partition(".")
            value = ((container.get("resources") or {}).get(section) or {}).get(name)
            return str(value) if value is not None else "0"
        return None

    # --- volumes --------------------------------------------------------------------------

    def volumes(self, pod: Obj, directory: Path, *, host_ip: str, pod_ip: str) -> dict[str, Obj]:
        """Materialize every non-hostPath volume under ``directory``; returns volumes by name."""
        by_name: dict[str, Obj] = {}
        for volume in pod["spec"].get("volumes") or []:
            by_name[volume["name"]] = volume
            if "hostPath" in volume:
                continue
            target = directory / volume["name"]
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            self._fill(pod, volume, target, host_ip=host_ip, pod_ip=pod_ip)
        return by_name

    def _fill(self, pod: Obj, volume: Obj, target: Path, *, host_ip: str, pod_ip: str) -> None:
        namespace = pod["metadata"]["namespace"]
        if "configMap" in volume or "secret" in volume:
            kind = "configmaps" if "configMap" in volume else "secrets"
            ref = volume.get("configMap") or volume["secret"]
            name = ref.get("name") or ref.get("secretName", "")
            data = self._data(kind, namespace, name, optional=bool(ref.get("optional")))
            _write_items(target, data, ref.get("items"))
        elif "downwardAPI" in volume:
            for item in volume["downwardAPI"].get("items") or []:
                if "fieldRef" in item:
                    text = field_value(pod, item["fieldRef"]["fieldPath"], host_ip, pod_ip)
                    _write(target / item["path"], text.encode())
        elif "projected" in volume:
            for source in volume["projected"].get("sources") or []:
                self._fill_projection(pod, source, target, host_ip=host_ip, pod_ip=pod_ip)

    def _fill_projection(
        self, pod: Obj, source: Obj, target: Path, *, host_ip: str, pod_ip: str
    ) -> None:
        namespace = pod["metadata"]["namespace"]
        if "configMap" in source or "secret" in source:
            kind = "configmaps" if "configMap" in source else "secrets"
            ref = source.get("configMap") or source["secret"]
            data = self._data(kind, namespace, ref["name"], optional=bool(ref.get("optional")))
            _write_items(target, data, ref.get("items"))
        elif "downwardAPI" in source:
            self._fill(pod, source, target, host_ip=host_ip, pod_ip=pod_ip)
        elif "serviceAccountToken" in source:
            spec = source["serviceAccountToken"]
            _write(target / spec["path"], self._token(pod, spec).encode())

    def _token(self, pod: Obj, spec: Obj) -> str:
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        body: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [spec["audience"]] if spec.get("audience") else [],
                "expirationSeconds": int(spec.get("expirationSeconds") or 3607),
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"]},
            },
        }
        body["spec"]["boundObjectRef"]["uid"] = meta["uid"]
        try:
            done = self.api.request(
                "POST",
                f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token",
                body=body,
            )
        except ApiError as exc:
            raise _config_error(f"token for service account {account}: {exc}") from exc
        return str(((done or {}).get("status") or {}).get("token", ""))


def mounts_for(container: Obj, volumes: Mapping[str, Obj], directory: Path) -> list[VolumeMount]:
    """The container's volumeMounts with their kinds and host-side sources."""
    out: list[VolumeMount] = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"], {})
        kind = next((k for k in VolumeKind if k.value in volume), VolumeKind.OTHER)
        out.append(
            VolumeMount(
                name=mount["name"],
                kind=kind,
                mount_path=mount["mountPath"],
                read_only=bool(mount.get("readOnly")),
                sub_path=mount.get("subPath", ""),
                mount_propagation=mount.get("mountPropagation", ""),
                host_path=volume["hostPath"]["path"] if kind is VolumeKind.HOST_PATH else "",
                source=None if kind is VolumeKind.HOST_PATH else directory / mount["name"],
            )
        )
    return out


def field_value(pod: Obj, field_path: str, host_ip: str, pod_ip: str) -> str:
    """The downward-API value of ``field_path`` for ``pod`` ("" when unknown)."""
    meta, spec = pod["metadata"], pod["spec"]
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if field_path in simple:
        return str(simple[field_path])
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", field_path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    if field_path in ("metadata.labels", "metadata.annotations"):
        items = (meta.get(field_path.split(".")[1]) or {}).items()
        return "\n".join(f'{key}="{value}"' for key, value in sorted(items))
    return ""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names are replaced, ``$$`` escapes a ``$``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_REF.sub(replace, text)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _write_items(target: Path, data: Mapping[str, bytes], items: list[Obj] | None) -> None:
    if items:
        for item in items:
            if item["key"] in data:
                _write(target / item["path"], data[item["key"]])
    else:
        for key, value in data.items():
            _write(target / key, value)
