"""Kubernetes side: CRDs, controller, node pods, CLI and the sandbox."""

__version__ = "0.1.0"
