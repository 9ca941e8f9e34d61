"""Errors raised by the pure lifecycle core.

Why a hierarchy of our own: callers (the CLI, the controller, the collection's check mode) decide
what to do by *kind* of problem, not by where it came from. Bad user input must become one line per
problem with its field path and exit code 2 / an ``InvalidSpec`` condition; it must never surface as
a traceback. Other modules add their own subclasses here; keep the tree below up to date::

    LifecycleError                 root of everything lifecycle raises on purpose
     ├── SpecError                 a NodeWright / DeploymentPolicy document is invalid
     │                             (``.problems``: one ``path: message`` line per problem)
     ├── InvalidVersionError       a string is not strict semver (also a ValueError)
     └── DependencyError           the package dependency graph cannot be used
          ├── UnknownDependencyError   a package depends on a package that is not in the CR
          └── DependencyCycleError     the dependencies form a cycle (``.cycle`` names it)
"""

from __future__ import annotations

from collections.abc import Sequence


class LifecycleError(Exception):
    """Root of every error the lifecycle core raises on purpose."""


class SpecError(LifecycleError):
    """A custom resource document failed validation.

    Attributes:
        problems: One line per problem, ``path: message``, paths rooted at the document
            (``spec.packages.gpu-tuning.version: ...``), field names in their camelCase wire form.
    """

    def __init__(self, problems: Sequence[str], *, kind: str = "object") -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        self.kind = kind
        count = len(self.problems)
        head = f"invalid {kind}: {count} problem{'s' if count != 1 else ''}"
        super().__init__("\n".join([head, *self.problems]))


class InvalidVersionError(LifecycleError, ValueError):
    """A version string is not strict semver (``MAJOR.MINOR.PATCH[-pre][+build]``)."""

    def __init__(self, version: str) -> None:
        self.version = version
        super().__init__(f'"{version}" is not strict semver (MAJOR.MINOR.PATCH)')


class DependencyError(LifecycleError):
    """The dependency graph of a CR's packages cannot be used for ordering."""


class UnknownDependencyError(DependencyError):
    """A package depends on a name that is not a package of the same CR."""

    def __init__(self, package: str, dependency: str) -> None:
        self.package = package
        self.dependency = dependency
        super().__init__(f"package {package!r} depends on {dependency!r}, which is not in this CR")


class DependencyCycleError(DependencyError):
    """The dependencies form a cycle; ``cycle`` lists it with the first name repeated at the end."""

    def __init__(self, cycle: Sequence[str]) -> None:
        self.cycle: tuple[str, ...] = tuple(cycle)
        super().__init__(f"dependency cycle: {' -> '.join(self.cycle)}")
