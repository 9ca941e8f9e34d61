"""``nwb pause|resume|disable|enable NAME`` and ``nwb resume-compartment NAME COMPARTMENT``.

They set or remove an annotation on the NodeWright that the controller reads on every pass:
``bridge.nodewright.io/pause`` / ``disable`` = ``"true"`` (``lifecycle.sequencing``: a paused CR
starts nothing new and running pods finish; a disabled one also stops gating later CRs) and
``bridge.nodewright.io/reset-compartment`` (a Stalled compartment starts again at its first batch
and its failed nodes are candidates again; the controller removes the annotation once handled).
"""

from __future__ import annotations

import click

from lifecycle.nodestate import (
    DISABLE_ANNOTATION,
    PAUSE_ANNOTATION,
    RESET_COMPARTMENT_ANNOTATION,
)
from nodewright_bridge.commands.changing import (
    change_options,
    confirmed,
    get_cr,
    meta,
    patch_cr_annotations,
    reported,
    say,
)
from nodewright_bridge.commands.common import EXIT_BAD_INPUT, CommandError, connect


def _switch(
    name: str,
    key: str,
    on: bool,
    *,
    dry_run: bool,
    kubeconfig: str | None,
    kube_context: str | None,
    what: str,
) -> None:
    rest = connect(kubeconfig, kube_context)
    cr = get_cr(rest, name)
    current = (meta(cr).get("annotations") or {}).get(key)
    if (current == "true") == on and (on or current is None):
        click.echo(f"nodewright/{name}: {what} already; nothing changed")
        return
    if not dry_run:
        patch_cr_annotations(rest, name, {key: "true" if on else None})
    shown = f"{key}=true" if on else f"{key} removed"
    say(f"nodewright/{name}: {what} ({shown})", dry_run=dry_run)


def _switch_command(
    verb: str, key: str, *, on: bool, what: str, doc: str, question: str = ""
) -> click.Command:
    """``nwb <verb> NAME``: set (``on``) or remove the annotation ``key``; with ``question``
    it asks first (``--yes`` skips the question)."""

    def run(
        name: str,
        dry_run: bool,
        kubeconfig: str | None,
        kube_context: str | None,
        yes: bool = False,
    ) -> None:
        with reported():
            if question:
                confirmed(question.format(name=name), yes=yes, dry_run=dry_run)
            _switch(
                name,
                key,
                on,
                dry_run=dry_run,
                kubeconfig=kubeconfig,
                kube_context=kube_context,
                what=what,
            )

    run.__doc__ = doc
    options = change_options(confirm=bool(question))(run)
    return click.command(name=verb)(click.argument("name")(options))


pause = _switch_command(
    "pause",
    PAUSE_ANNOTATION,
    on=True,
    what="paused",
    doc="Pause a rollout: nothing new starts; running pods finish and are recorded.",
)
resume = _switch_command(
    "resume", PAUSE_ANNOTATION, on=False, what="resumed", doc="Resume a paused rollout."
)
disable = _switch_command(
    "disable",
    DISABLE_ANNOTATION,
    on=True,
    what="disabled",
    doc="Disable a NodeWright: nothing new starts and later CRs no longer wait for it.",
    question="Disable nodewright/{name}? Later CRs stop waiting for it.",
)
enable = _switch_command(
    "enable",
    DISABLE_ANNOTATION,
    on=False,
    what="enabled",
    doc="Enable a disabled NodeWright again.",
)


@click.command(name="resume-compartment")
@click.argument("name")
@click.argument("compartment")
@change_options(confirm=True)
def resume_compartment(  # noqa: PLR0917 - click passes options positionally
    name: str,
    compartment: str,
    dry_run: bool,
    yes: bool,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Resume a Stalled compartment (``*``: every one): it starts again at its first batch and
    its failed nodes are attempted again."""
    with reported():
        rest = connect(kubeconfig, kube_context)
        cr = get_cr(rest, name)
        compartments = (cr.get("status") or {}).get("compartments") or {}
        stalled = sorted(
            c
            for c, s in compartments.items()
            if ((s or {}).get("batchState") or {}).get("shouldStop")
        )
        wanted = sorted(compartments) if compartment == "*" else [compartment]
        if compartment != "*" and compartment not in compartments:
            known = ", ".join(sorted(compartments)) or "none yet"
            raise CommandError(
                f"nodewright/{name} has no compartment {compartment!r} (known: {known})",
                EXIT_BAD_INPUT,
            )
        targets = [c for c in wanted if c in stalled]
        if not targets:
            click.echo(f"nodewright/{name}: {compartment} is not Stalled; nothing changed")
            return
        confirmed(
            f"Resume {', '.join(targets)} of nodewright/{name}? Its failed nodes are attempted "
            "again.",
            yes=yes,
            dry_run=dry_run,
        )
        current = (meta(cr).get("annotations") or {}).get(RESET_COMPARTMENT_ANNOTATION) or ""
        names = {c for c in current.split(",") if c}
        value = (
            "*" if compartment == "*" or "*" in names else ",".join(sorted(names | set(targets)))
        )
        if not dry_run:
            patch_cr_annotations(rest, name, {RESET_COMPARTMENT_ANNOTATION: value})
        say(
            f"nodewright/{name}: resuming {', '.join(targets)} "
            f"({RESET_COMPARTMENT_ANNOTATION}={value}; the controller removes it when done)",
            dry_run=dry_run,
        )
