"""The controller image for tests: built from this checkout (or re-used when nothing changed, see
``nodewright_bridge.images.controller``), optionally pushed to a sandbox registry."""

from __future__ import annotations

import functools
import json
import shutil

import pytest

from nodewright_bridge.images.controller import ControllerImage, build_controller_image
from nodewright_bridge.sandbox import rootfs
from playbook_adapter import imaging


def engine() -> imaging.Engine:
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: run `make setup`")
    return imaging.detect_engine("podman")


@functools.cache
def controller_image() -> ControllerImage:
    """``localhost/nodewright-bridge:<version>`` as ``make images`` builds it."""
    return build_controller_image(engine(), rootfs.ensure_base_rootfs())


def push_as(image: ControllerImage, reference: str) -> str:
    """Tag ``image`` as ``reference`` and push it to that (plain-HTTP) registry."""
    engine().run(["tag", image.image, reference])
    imaging.push_image(engine(), reference, tls_verify=False)
    return reference


def image_labels(reference: str) -> dict[str, str]:
    shown = engine().run(["image", "inspect", "--format", "{{json .Labels}}", reference])
    return dict(json.loads(shown.stdout or "{}") or {})
