"""``nwb import playbook``: turn an Ansible playbook into NodeWright CRs and DeploymentPolicies.

The translation lives in ``playbook_adapter.importing`` (its docstring has the mapping table).
YAML goes to stdout (or one file per document in ``--output-dir``); what could not be translated
goes to stderr with ``file:line``, so ``nwb import playbook ... | kubectl apply -f -`` stays clean.
"""

from __future__ import annotations

from pathlib import Path

import click

from playbook_adapter import importing
from playbook_adapter.errors import PackageError


@click.group(name="import")
def command() -> None:
    """Turn existing playbooks into NodeWright CRs and policies."""


@command.command(name="playbook")
@click.argument("playbook", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "-i",
    "--inventory",
    type=click.Path(exists=True, path_type=Path),
    help="Inventory file or directory (group_vars next to it are read).",
)
@click.option(
    "--group-label",
    "group_labels",
    multiple=True,
    metavar="GROUP=LABELSEL",
    help="Map an inventory group to a node label selector, e.g. gpu=nvidia.com/gpu.present=true "
    "or 'gpu=pool in (a100,h100)'. Repeatable; every group a play targets needs one.",
)
@click.option(
    "--image-prefix",
    default=importing.DEFAULT_IMAGE_PREFIX,
    show_default=True,
    help="Registry path of package images; a package's image is PREFIX/NAME.",
)
@click.option("--default-version", help="Version for roles without a manifest or version.")
@click.option(
    "--roles-path",
    "roles_paths",
    multiple=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Extra directory to find roles in (repeatable).",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one YAML file per document here instead of stdout.",
)
def playbook(
    *,
    playbook: Path,
    inventory: Path | None,
    group_labels: tuple[str, ...],
    image_prefix: str,
    default_version: str | None,
    roles_paths: tuple[Path, ...],
    output_dir: Path | None,
) -> None:
    """Translate each play of PLAYBOOK into a NodeWright and a DeploymentPolicy."""
    try:
        options = importing.ImportOptions(
            group_labels=importing.parse_group_labels(group_labels),
            image_prefix=image_prefix,
            default_version=default_version,
            roles_paths=roles_paths,
        )
        result = importing.import_playbook(playbook, inventory=inventory, options=options)
    except PackageError as exc:
        for line in exc.problems:
            click.echo(f"error: {line}", err=True)
        raise SystemExit(2) from None
    for note in result.notes:
        click.echo(f"{'not translated' if note.untranslated else 'note'}: {note}", err=True)
    if output_dir is None:
        click.echo(importing.render_documents(result.documents), nl=False)
        return
    output_dir.mkdir(parents=True, exist_ok=True)
    for document in result.documents:
        kind = str(document["kind"]).lower()
        name = document["metadata"]["name"]
        path = output_dir / f"{name}.{kind}.yaml"
        path.write_text(importing.render_documents([document]), encoding="utf-8")
        click.echo(f"wrote {path}", err=True)
