"""``nwb image``: build the project's own images and keep their lock file.

- ``nwb image build controller``: the controller image (``nodewright_bridge.images.controller``);
  prints its reference on stdout, size, base and revision on stderr.
- ``nwb image build agent-base``: the agent base that package images start from
  (``playbook_adapter.imaging.ensure_agent_base`` on the sandbox's Debian tree).
- ``nwb image lock``: resolve ``requirements.lock`` again (after changing dependencies).

Both builds need a checkout, root (the Debian tree comes from debootstrap) and podman.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from nodewright_bridge.commands.common import EXIT_FAILED


def _fail(exc: Exception) -> None:
    click.echo(f"error: {exc}", err=True)
    raise SystemExit(EXIT_FAILED)


@click.group(name="image")
def command() -> None:
    """Build the controller image and the agent base image; keep the lock file."""


@command.group(name="build")
def build() -> None:
    """Build one of the project's images."""


@build.command(name="controller")
@click.option(
    "--tag", default=None, help="Image reference [default: localhost/nodewright-bridge:<version>]."
)
@click.option("--push", is_flag=True, help="Push the image to the tag's registry.")
@click.option("--tls-verify/--no-tls-verify", default=True, help="Registry TLS when pushing.")
@click.option("--rebuild", is_flag=True, help="Build even when an identical build exists.")
@click.option(
    "--base-image",
    default=None,
    help="A local image to build on instead of the slim Python base (needs /usr/bin/python3 "
    "of the lock's Python version).",
)
def controller(
    tag: str | None, push: bool, tls_verify: bool, rebuild: bool, base_image: str | None
) -> None:
    """The controller image: the controller and the nwb CLI, non-root, read-only-root ready."""
    from nodewright_bridge.images.controller import build_controller_image  # noqa: PLC0415
    from nodewright_bridge.sandbox.rootfs import ensure_base_rootfs  # noqa: PLC0415
    from playbook_adapter.errors import PackageError  # noqa: PLC0415
    from playbook_adapter.imaging import detect_engine  # noqa: PLC0415

    started = time.monotonic()
    try:
        result = build_controller_image(
            detect_engine("podman"),
            ensure_base_rootfs(lambda line: click.echo(line, err=True)),
            tag=tag,
            push=push,
            tls_verify=tls_verify,
            rebuild=rebuild,
            base_image=base_image,
        )
    except PackageError as exc:
        _fail(exc)
        return
    note = "built" if result.built else "unchanged, re-used"
    click.echo(
        f"{result.image}: {result.size_bytes / 1e6:.0f} MB, version {result.version}, "
        f"revision {result.revision}, on {result.base_image} ({note} in "
        f"{time.monotonic() - started:.1f}s{', pushed' if push else ''})",
        err=True,
    )
    click.echo(result.image)


@build.command(name="agent-base")
def agent_base() -> None:
    """The agent base image package images are built on (from the sandbox's Debian tree)."""
    from nodewright_bridge.sandbox.rootfs import ensure_base_rootfs  # noqa: PLC0415
    from playbook_adapter import imaging  # noqa: PLC0415
    from playbook_adapter.errors import PackageError  # noqa: PLC0415

    try:
        engine = imaging.detect_engine("podman")
        tree = ensure_base_rootfs(lambda line: click.echo(line, err=True))
        base_image = f"localhost/nwb-base:{tree.name}"
        imaging.ensure_rootfs_image(engine, tree, base_image)
        built = imaging.ensure_agent_base(engine, base_image)
    except PackageError as exc:
        _fail(exc)
        return
    size = imaging.image_size(engine, built.image) / 1e6
    note = "built" if built.built else "cached"
    click.echo(f"{built.image}: {size:.0f} MB on {base_image} ({note})", err=True)
    click.echo(built.image)


@command.command(name="lock")
def lock() -> None:
    """Resolve requirements.lock again from pyproject.toml's runtime dependencies."""
    from nodewright_bridge.images.controller import checkout_root  # noqa: PLC0415
    from nodewright_bridge.images.lockfile import LOCK_NAME, resolve_lock  # noqa: PLC0415
    from playbook_adapter.errors import PackageError  # noqa: PLC0415

    try:
        root = Path(checkout_root())
        text = resolve_lock(root)
    except PackageError as exc:
        _fail(exc)
        return
    (root / LOCK_NAME).write_text(text, encoding="utf-8")
    click.echo(str(root / LOCK_NAME))
