"""A reconciler for tests only: it logs each key and does nothing else.

``python logging_reconciler.py <nwb controller options>`` runs the real ``nwb controller``
command (``make_command``) around it: options, signals and lease handling without the product
reconciler.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from nodewright_bridge.commands.controller import make_command
from nodewright_bridge.runtime.manager import ReconcilerContext
from nodewright_bridge.runtime.reconciling import Result

logger = logging.getLogger(__name__)


class LoggingReconciler:
    def reconcile(self, key: str) -> Result:
        logger.info("reconciled", extra={"key": key})
        return Result()

    def keys_for(self, informer: str, obj: Mapping[str, Any]) -> Iterable[str]:
        return [f"{informer}:{obj['metadata']['name']}"]


def build_reconciler(context: ReconcilerContext) -> LoggingReconciler:
    return LoggingReconciler()


if __name__ == "__main__":
    make_command(build_reconciler)(prog_name="nwb controller")
