"""``nwb-agent``: the package image's entry point (docs/node-pod-contract.md, "The pod").

Why a separate, small console script: it runs inside every package pod, so it imports only the
agent (not the controller, not the Kubernetes client) and starts fast. Its inputs come from env
and mounted files (settings.py), never from var values on the command line.
"""

from __future__ import annotations

import sys

import click

from playbook_adapter.agent import interrupts, running, validating
from playbook_adapter.agent.settings import AgentSettings
from playbook_adapter.errors import BadInputError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Run a NodeWright package's stages (or an interrupt) on this node, or validate it."""


@main.command("run")
@click.option(
    "--stages",
    default="apply,apply-check,config,config-check",
    show_default=True,
    help="Comma-separated stages, run in this order; the first failure stops the rest.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Check mode (--check --diff): report what would change, change nothing on the host.",
)
def run_command(stages: str, check: bool) -> None:
    """Run the role's task files for the given stages against the host."""
    settings = _settings()
    outcome = running.run(settings, stages, check=check)
    sys.exit(outcome.exit_code)


@main.command("interrupt")
@click.option(
    "--type",
    "kind",
    required=True,
    help="reboot, service, restartAllServices or noop.",
)
@click.option("--services", default="", help="Comma-separated systemd units (type service).")
def interrupt_command(kind: str, services: str) -> None:
    """Run an interrupt once per NW_RESOURCE_ID (a host flag guards re-runs)."""
    settings = _settings()
    units = [s.strip() for s in services.split(",") if s.strip()]
    try:
        code, result = interrupts.interrupt(settings, kind, units)
    except BadInputError as exc:
        for problem in exc.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(running.EXIT_BAD_INPUT)
    running.write_termination_log(settings.termination_log, result)
    sys.exit(code)


@main.command("validate")
def validate_command() -> None:
    """Check the package and its vars before any node is touched (no host access needed)."""
    sys.exit(validating.run(_settings()))


def _settings() -> AgentSettings:
    try:
        return AgentSettings.from_env()
    except ValueError as exc:
        click.echo(f"error: environment: {exc}", err=True)
        sys.exit(running.EXIT_BAD_INPUT)
