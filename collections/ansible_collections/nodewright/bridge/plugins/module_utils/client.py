# -*- coding: utf-8 -*-
# Copyright: nodewright-bridge contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""API access for the modules: connection options, client construction, CR get/apply/delete.

The modules speak only the CRD contract (group bridge.nodewright.io, version v1alpha1); they do
not import nodewright-bridge's Python packages, so the collection installs anywhere the
``kubernetes`` client does.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.rest import ApiException

    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - reported by the module via missing_required_lib
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = exc
    ApiException = Exception

GROUP = "bridge.nodewright.io"
VERSION = "v1alpha1"
NODEWRIGHTS = "nodewrights"
POLICIES = "deploymentpolicies"

AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
    host=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    validate_certs=dict(type="bool", aliases=["verify_ssl"]),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"]),
)

WAIT_ARG_SPEC = dict(
    wait=dict(type="bool", default=False),
    wait_timeout=dict(type="int", default=3600),
    wait_sleep=dict(type="int", default=5),
)

_ENV = dict(
    kubeconfig="K8S_AUTH_KUBECONFIG",
    context="K8S_AUTH_CONTEXT",
    host="K8S_AUTH_HOST",
    api_key="K8S_AUTH_API_KEY",
    validate_certs="K8S_AUTH_VERIFY_SSL",
    ca_cert="K8S_AUTH_SSL_CA_CERT",
)


class BridgeModuleError(Exception):
    """An error the module reports with fail_json; ``details`` goes into the result."""

    def __init__(self, message, details=None):
        super(BridgeModuleError, self).__init__(message)
        self.details = details or {}


def auth_options(params, environ=None):
    """Module params merged with the K8S_AUTH_* environment, params first."""
    environ = os.environ if environ is None else environ
    merged = {}
    for key, env_name in _ENV.items():
        value = params.get(key)
        if value is None and environ.get(env_name):
            value = environ[env_name]
            if key == "validate_certs":
                value = value.lower() not in ("0", "false", "no")
        merged[key] = value
    return merged


def api_client(params):
    """A configured ApiClient from the connection options."""
    opts = auth_options(params)
    configuration = k8s_client.Configuration()
    try:
        if opts["host"] and opts["api_key"]:
            configuration.host = opts["host"]
            configuration.api_key = {"authorization": "Bearer " + opts["api_key"]}
        elif opts["kubeconfig"] or os.environ.get("KUBECONFIG") or os.path.exists(
            os.path.expanduser("~/.kube/config")
        ):
            k8s_config.load_kube_config(
                config_file=opts["kubeconfig"],
                context=opts["context"],
                client_configuration=configuration,
            )
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)
    except Exception as exc:
        raise BridgeModuleError("could not load Kubernetes credentials: %s" % exc)
    if opts["host"]:
        configuration.host = opts["host"]
    if opts["validate_certs"] is not None:
        configuration.verify_ssl = opts["validate_certs"]
    if opts["ca_cert"]:
        configuration.ssl_ca_cert = opts["ca_cert"]
    return k8s_client.ApiClient(configuration)


def api_error_message(exc):
    """The API server's own message (CEL/OpenAPI validation text) rather than a raw body dump."""
    body = getattr(exc, "body", None)
    if body:
        try:
            payload = json.loads(body)
            message = payload.get("message")
            if message:
                return message
        except (TypeError, ValueError):
            pass
    reason = getattr(exc, "reason", None) or str(exc)
    status = getattr(exc, "status", None)
    return "%s (HTTP %s)" % (reason, status) if status else reason


class Resources(object):
    """Cluster-scoped NodeWright / DeploymentPolicy access with clear errors."""

    def __init__(self, api):
        self.api = api
        self.custom = k8s_client.CustomObjectsApi(api)
        self.core = k8s_client.CoreV1Api(api)

    def get(self, plural, name):
        try:
            return self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise BridgeModuleError("reading %s %s failed: %s" % (plural, name, api_error_message(exc)))

    def list(self, plural):
        try:
            return self.custom.list_cluster_custom_object(GROUP, VERSION, plural).get("items", [])
        except ApiException as exc:
            raise BridgeModuleError("listing %s failed: %s" % (plural, api_error_message(exc)))

    def apply(self, plural, body, existing, dry_run=False):
        """Create or merge-patch; with dry_run the API server validates and changes nothing."""
        kwargs = {"dry_run": "All"} if dry_run else {}
        name = body["metadata"]["name"]
        try:
            if existing is None:
                return self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body, **kwargs)
            return self.custom.patch_cluster_custom_object(GROUP, VERSION, plural, name, body, **kwargs)
        except ApiException as exc:
            raise BridgeModuleError(
                "the API server rejected %s %s: %s" % (plural, name, api_error_message(exc))
            )

    def delete(self, plural, name, dry_run=False):
        kwargs = {"dry_run": "All"} if dry_run else {}
        try:
            self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name, **kwargs)
        except ApiException as exc:
            if getattr(exc, "status", None) == 404:
                return
            raise BridgeModuleError("deleting %s %s failed: %s" % (plural, name, api_error_message(exc)))

    def nodes(self):
        try:
            return [n.to_dict() for n in self.core.list_node().items]
        except ApiException as exc:
            raise BridgeModuleError("listing nodes failed: %s" % api_error_message(exc))
