"""``nwb crds``: print or write the CustomResourceDefinitions generated from the API models.

Why a command: the chart's ``crds/`` directory is generated output that a unit test compares with
this command's result, so "regenerate" is one documented step: ``nwb crds --output-dir
charts/nodewright-bridge/crds``.
"""

from __future__ import annotations

from pathlib import Path

import click

from nodewright_bridge import crds


@click.command(name="crds")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write one <plural>.<group>.yaml per CRD into DIR instead of printing a YAML stream.",
)
def command(output_dir: Path | None) -> None:
    """Print the CustomResourceDefinitions generated from the API models."""
    documents = crds.all_crds()
    if output_dir is None:
        click.echo("---\n".join(crds.render(doc) for doc in documents), nl=False)
        return
    output_dir.mkdir(parents=True, exist_ok=True)
    for doc in documents:
        path = output_dir / crds.file_name(doc)
        path.write_text(crds.render(doc), encoding="utf-8")
        click.echo(str(path))
