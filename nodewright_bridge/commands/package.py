"""``nwb package``: wrap Ansible roles as NodeWright packages (init, inspect, test, build).

Each subcommand lives in its own module so helpers can work on them independently; this group only
wires them together.
"""

from __future__ import annotations

import click

from nodewright_bridge.commands.package_authoring import init, inspect, test
from nodewright_bridge.commands.package_build import build


@click.group(name="package")
def command() -> None:
    """Wrap Ansible roles as NodeWright packages; build, inspect, test."""


command.add_command(init)
command.add_command(inspect)
command.add_command(test)
command.add_command(build)
