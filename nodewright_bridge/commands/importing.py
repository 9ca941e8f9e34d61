"""``nwb import playbook``: turn an Ansible playbook into NodeWright CRs and DeploymentPolicies.

The translation lives in ``playbook_adapter.importing`` (its docstring has the mapping table).
YAML goes to stdout (or one file per document in ``--output-dir``); what could not be translated
goes to stderr with ``file:line``, so ``nwb import playbook ... | kubectl apply -f -`` stays clean.
Roles generated from a play's own tasks are written to ``--roles-dir`` (default
``OUTPUT_DIR/roles``), each with its ``nodewright-package.yaml``, ready for ``nwb package build``.
"""

from __future__ import annotations

from pathlib import Path

import click

from playbook_adapter import importing, playroles
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
    "--tags",
    "tags",
    multiple=True,
    metavar="TAGS",
    help="The --tags you run the playbook with (comma-separated, repeatable): packages run "
    "only what ansible-playbook would.",
)
@click.option(
    "--skip-tags",
    "skip_tags",
    multiple=True,
    metavar="TAGS",
    help="The --skip-tags you run the playbook with (comma-separated, repeatable).",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one YAML file per document here instead of stdout.",
)
@click.option(
    "--roles-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where roles generated from plays' own tasks go [default: OUTPUT_DIR/roles].",
)
def playbook(
    *,
    playbook: Path,
    inventory: Path | None,
    group_labels: tuple[str, ...],
    image_prefix: str,
    default_version: str | None,
    roles_paths: tuple[Path, ...],
    tags: tuple[str, ...],
    skip_tags: tuple[str, ...],
    output_dir: Path | None,
    roles_dir: Path | None,
) -> None:
    """Translate each play of PLAYBOOK into a NodeWright and a DeploymentPolicy; a play's own
    tasks become generated roles (packages) next to them."""
    try:
        options = importing.ImportOptions(
            group_labels=importing.parse_group_labels(group_labels),
            image_prefix=image_prefix,
            default_version=default_version,
            roles_paths=roles_paths,
            tags=_tag_words(tags),
            skip_tags=_tag_words(skip_tags),
        )
        result = importing.import_playbook(playbook, inventory=inventory, options=options)
        roles_dir = roles_dir or (output_dir / "roles" if output_dir else None)
        if result.roles and roles_dir is None:
            names = ", ".join(r.name for r in result.roles)
            raise importing.PlaybookImportError(
                f"plays have tasks outside roles, which become generated roles ({names}): "
                "pass --output-dir DIR (roles go to DIR/roles) or --roles-dir DIR"
            )
        for note in result.notes:
            click.echo(f"{'not translated' if note.untranslated else 'note'}: {note}", err=True)
        if roles_dir is not None:
            for role in result.roles:
                _write_role(role, roles_dir, image_prefix)
    except PackageError as exc:
        for line in exc.problems:
            click.echo(f"error: {line}", err=True)
        raise SystemExit(2) from None
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


def _tag_words(values: tuple[str, ...]) -> tuple[str, ...]:
    """ansible-playbook's reading of --tags: each option comma-split, words stripped."""
    words = (w.strip() for value in values for w in value.split(","))
    return tuple(dict.fromkeys(w for w in words if w))


def _write_role(role: playroles.GeneratedRole, roles_dir: Path, image_prefix: str) -> None:
    written = playroles.write_role(role, roles_dir)
    image = f"{image_prefix.rstrip('/')}/{role.name}:{role.version}"
    click.echo(
        f"wrote role {written.path} (build it: nwb package build {written.path} --tag {image})",
        err=True,
    )
    if written.stale_version:
        click.echo(
            f"warning: role {role.name} changed but kept version {role.version}: nodes that "
            "have it would not be updated; import again with a newer --default-version",
            err=True,
        )
