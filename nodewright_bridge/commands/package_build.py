"""``nwb package build``: turn a role directory (with its manifest) into a package image.

Kept apart from ``package.py`` so the group's other subcommands evolve independently. The work is
in ``playbook_adapter.imaging``; this module parses options, reports, and maps errors to exit codes
(2 bad input, 1 engine failure).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

import click

from playbook_adapter import imaging
from playbook_adapter.errors import BadInputError, PackageError


def _build_time() -> datetime:
    # SOURCE_DATE_EPOCH makes the created label reproducible (the reproducible-builds convention).
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if epoch.isdigit():
        return datetime.fromtimestamp(int(epoch), tz=UTC)
    return datetime.now(tz=UTC)


def _fail(error: PackageError, code: int) -> None:
    for line in error.problems:
        click.echo(f"error: {line}", err=True)
    raise SystemExit(code)


@click.command(name="build")
@click.argument(
    "role_dir", type=click.Path(file_okay=False, exists=True, path_type=Path), default="."
)
@click.option("--tag", "tag", help="Image (repo[:tag]); default localhost/nodewright/NAME:VERSION.")
@click.option(
    "--base-image",
    default=imaging.DEFAULT_BASE_IMAGE,
    show_default=True,
    envvar="NWB_BASE_IMAGE",
    help="Image with python3 the package is built on.",
)
@click.option("--push", is_flag=True, help="Push the image to its registry after building.")
@click.option(
    "--oci-archive",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the image as an OCI archive to this file.",
)
@click.option(
    "--tls-verify/--no-tls-verify",
    default=True,
    show_default=True,
    help="Require HTTPS and verify certificates when pushing.",
)
@click.option("--engine", envvar="NWB_CONTAINER_ENGINE", help="podman, buildah or docker.")
def build(
    *,
    role_dir: Path,
    tag: str | None,
    base_image: str,
    push: bool,
    oci_archive: Path | None,
    tls_verify: bool,
    engine: str | None,
) -> None:
    """Build the OCI image of the package in ROLE_DIR (run `nwb package init` first)."""
    try:
        imaging.load_role_manifest(role_dir)  # bad input first, before looking for an engine
        runner = imaging.detect_engine(engine)
        started = time.monotonic()
        result = imaging.build_package(
            role_dir, engine=runner, tag=tag, base_image=base_image, now=_build_time()
        )
        built_in = time.monotonic() - started
        base_note = "built" if result.agent_base_built else "cached"
        click.echo(
            f"built {result.image} ({result.size_bytes / 1e6:.0f} MB) in {built_in:.1f}s "
            f"on {result.agent_base} ({base_note}) with {runner.name}",
            err=True,
        )
        click.echo(f"  roles: {', '.join(result.roles)}", err=True)
        click.echo(f"  collections: {', '.join(result.collections) or '-'}", err=True)
        _, image_tag = imaging.split_reference(result.image)
        version = result.labels[f"{imaging.LABEL_PREFIX}version"]
        if image_tag != version:
            click.echo(
                f"warning: tag {image_tag} differs from the package version {version}; "
                "node pods pull IMAGE:VERSION unless the CR pins a digest",
                err=True,
            )
        if oci_archive is not None:
            imaging.save_oci_archive(runner, result.image, oci_archive)
            click.echo(f"wrote {oci_archive}", err=True)
        if push:
            started = time.monotonic()
            digest = imaging.push_image(runner, result.image, tls_verify=tls_verify)
            click.echo(
                f"pushed {result.image} {digest} in {time.monotonic() - started:.1f}s", err=True
            )
        click.echo(result.image)
    except BadInputError as exc:
        _fail(exc, 2)
    except PackageError as exc:
        _fail(exc, 1)
