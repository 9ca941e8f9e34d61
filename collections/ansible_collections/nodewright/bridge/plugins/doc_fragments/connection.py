# -*- coding: utf-8 -*-
# Copyright: nodewright-bridge contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection options shared by every module; same names as kubernetes.core uses."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file. Defaults to C(K8S_AUTH_KUBECONFIG), then C(KUBECONFIG), then
        C(~/.kube/config), then the in-cluster service account.
    type: path
  context:
    description:
      - The kubeconfig context to use. Defaults to C(K8S_AUTH_CONTEXT) or the current context.
    type: str
  host:
    description:
      - URL of the API server. Defaults to C(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - Bearer token for the API server. Defaults to C(K8S_AUTH_API_KEY).
    type: str
  validate_certs:
    description:
      - Verify the API server's certificate. Defaults to C(K8S_AUTH_VERIFY_SSL) or true.
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to a CA bundle for the API server. Defaults to C(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
requirements:
  - python >= 3.9
  - kubernetes >= 24.2.0
"""

    WAIT = r"""
options:
  wait:
    description:
      - Wait until the rollout is Ready (every targeted node complete) or has failed terminally
        (a compartment Stalled, or validation failed and Degraded).
    type: bool
    default: false
  wait_timeout:
    description:
      - How many seconds to wait before failing the task.
    type: int
    default: 3600
  wait_sleep:
    description:
      - Seconds between status checks.
    type: int
    default: 5
"""
