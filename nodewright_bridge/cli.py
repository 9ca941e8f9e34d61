"""The ``nwb`` / ``kubectl-nodewright`` command line.

Subcommands live in their own ``nodewright_bridge.commands.<name>`` modules and are imported only
when invoked, so ``nwb plan`` stays fast and does not pull in the Kubernetes client or Ansible.
Exit codes: 0 ok, 1 failure, 2 bad input or usage.
"""

from __future__ import annotations

import importlib

import click

from nodewright_bridge import __version__

# name -> (module under nodewright_bridge.commands, one-line help). The module exposes ``command``
# (or the attribute after ``:``).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "crds": ("crds", "Print the CustomResourceDefinitions generated from the API models."),
    "plan": ("plan", "Show which nodes go in which batch, before anything is applied."),
    "status": ("status", "Live progress of a rollout: compartments, batches, every node."),
    "sandbox": ("sandbox", "A real control plane on loopback with simulated nodes."),
    "package": ("package", "Wrap Ansible roles as NodeWright packages; build, inspect, test."),
    "import": ("importing", "Turn existing playbooks into NodeWright CRs and policies."),
    "controller": ("controller", "Run the controller."),
    "demo": ("demo", "Run the end-to-end demo on the sandbox."),
    "image": ("image", "Build the controller image and the agent base image."),
    # Day-2 operations ("module:attribute" when a module holds several commands).
    "pause": ("switches:pause", "Pause a rollout: nothing new starts."),
    "resume": ("switches:resume", "Resume a paused rollout."),
    "disable": ("switches:disable", "Disable a NodeWright (later CRs stop waiting for it)."),
    "enable": ("switches:enable", "Enable a disabled NodeWright."),
    "resume-compartment": ("switches:resume_compartment", "Resume a Stalled compartment."),
    "rerun": ("node_ops:rerun", "Run a package again on a node, through the rollout."),
    "reset": ("node_ops:reset", "Forget a NodeWright's state on nodes (human cordons stay)."),
    "ignore": ("node_ops:ignore", "Keep rollouts off a node."),
    "unignore": ("node_ops:unignore", "Let rollouts pick a node again."),
    "logs": ("logs", "What a package printed on a node, also after a failure."),
    "nodes": ("nodes", "Per-node state across NodeWrights."),
    "try": ("try_role", "Roll your own role onto sandbox nodes, in one command."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in SUBCOMMANDS if self._load(name) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(name)
        if entry is None:
            return None
        module_name, _, attribute = entry[0].partition(":")
        try:
            module = importlib.import_module(f"nodewright_bridge.commands.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"nodewright_bridge.commands.{module_name}":
                return None  # not built yet in this checkout
            raise
        command: click.Command = getattr(module, attribute or "command")
        return command


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from nodewright_bridge.buildinfo import version_line  # noqa: PLC0415 (git only when asked)

    click.echo(version_line())
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help=f"Show the version ({__version__}) and the revision, then exit.",
)
def main() -> None:
    """nodewright-bridge: run Ansible roles on Kubernetes nodes, safely, in canary batches."""


if __name__ == "__main__":
    main()
