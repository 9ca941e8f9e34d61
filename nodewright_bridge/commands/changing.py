"""What the day-2 verbs (``pause``, ``rerun``, ``reset``, ``ignore``, ...) share.

Every verb prints what it changed (``nodewright/NAME: ...``, ``node/N: ...``), ``--dry-run``
prints it without writing, and the disruptive ones (``disable``, ``rerun``, ``reset``,
``resume-compartment``) ask first unless ``--yes``. Node writes carry the resourceVersion they were
decided from (a merge patch with it is refused with 409 when the controller wrote meanwhile) and
are decided again from a fresh read, so a verb never overwrites the controller's bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from nodewright_bridge.commands.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    CommandError,
    JsonObject,
    kube_options,
)
from nodewright_bridge.errors import ApiError, ConflictError, NotFoundError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.rest import PatchType, Rest

F = TypeVar("F", bound=Callable[..., Any])
CONTROLLER_NAMESPACE = "nodewright-system"
WRITE_TRIES = 5


def change_options(*, confirm: bool) -> Callable[[F], F]:
    """``--dry-run`` (and ``--yes`` when the verb asks first) plus the kube options."""

    def decorate(command: F) -> F:
        command = kube_options()(command)
        if confirm:
            command = click.option(
                "-y", "--yes", is_flag=True, help="Do not ask for confirmation."
            )(command)
        return click.option(
            "--dry-run", is_flag=True, help="Print what would change; change nothing."
        )(command)

    return decorate


def namespace_option(command: F) -> F:
    return click.option(
        "-n",
        "--namespace",
        default=CONTROLLER_NAMESPACE,
        show_default=True,
        help="The controller's namespace (package pods, the nwb-logs ConfigMaps).",
    )(command)


@contextmanager
def reported() -> Iterator[None]:
    """One ``error: ...`` line and the exit code for the failures a verb expects."""
    try:
        yield
    except CommandError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(exc.code) from None
    except NotFoundError as exc:
        click.echo(f"error: not found: {exc}", err=True)
        raise click.exceptions.Exit(EXIT_BAD_INPUT) from None
    except ApiError as exc:
        click.echo(f"error: the API server refused or is unreachable: {exc}", err=True)
        raise click.exceptions.Exit(EXIT_FAILED) from None


def confirmed(question: str, *, yes: bool, dry_run: bool) -> None:
    """Ask ``question`` unless ``--yes`` or ``--dry-run``; a no ends the command (exit 1)."""
    if yes or dry_run:
        return
    if not click.confirm(question, default=False):
        raise CommandError("aborted; nothing changed", EXIT_FAILED)


def get_cr(rest: Rest, name: str) -> JsonObject:
    try:
        return rest.get(resources.NODEWRIGHTS, name)
    except NotFoundError:
        raise CommandError(f"NodeWright {name!r} not found", EXIT_BAD_INPUT) from None


def get_node(rest: Rest, name: str) -> JsonObject:
    try:
        return rest.get(resources.NODES, name)
    except NotFoundError:
        raise CommandError(f"node {name!r} not found", EXIT_BAD_INPUT) from None


def meta(obj: JsonObject) -> dict[str, Any]:
    out: dict[str, Any] = obj.get("metadata") or {}
    return out


def patch_cr_annotations(rest: Rest, name: str, changes: dict[str, str | None]) -> None:
    rest.patch(
        resources.NODEWRIGHTS,
        name,
        {"metadata": {"annotations": changes}},
        patch_type=PatchType.MERGE,
    )


def change_node(
    rest: Rest,
    name: str,
    decide: Callable[[JsonObject], JsonObject | None],
) -> JsonObject | None:
    """Read the node, ``decide`` the merge patch from it (None: nothing to change) and write it
    conditionally on the resourceVersion read; decided again after a conflict."""
    for _ in range(WRITE_TRIES):
        node = get_node(rest, name)
        patch = decide(node)
        if patch is None:
            return None
        body = dict(patch)
        body["metadata"] = {
            **(patch.get("metadata") or {}),
            "resourceVersion": meta(node).get("resourceVersion"),
        }
        try:
            rest.patch(resources.NODES, name, body, patch_type=PatchType.MERGE)
        except ConflictError:
            continue
        return patch
    raise CommandError(f"node {name!r} keeps changing under us; try again", EXIT_FAILED)


def say(text: str, *, dry_run: bool) -> None:
    click.echo(f"{text} (dry run)" if dry_run else text)
