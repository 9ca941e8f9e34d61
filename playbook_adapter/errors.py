"""Errors of the Ansible side, classified by what the caller should do about them.

    PackageError                  root; never raised itself
    ├── BadInputError             the user must fix something (exit 2): manifest, vars, files
    │   ├── ManifestError         nodewright-package.yaml missing, malformed or inconsistent
    │   ├── VarsError             vars violate the package's argument schema
    │   └── RoleLayoutError       a role directory that cannot be turned into a package
    └── AgentError                the run itself could not be carried out (exit 1)

``problems`` carries one line per problem with its field path, so the CLI prints them without a
traceback. Messages never include var values: they may be secrets.
"""

from __future__ import annotations


class PackageError(Exception):
    """Root of playbook_adapter errors."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = problems or [message]


class BadInputError(PackageError):
    """Input the user must correct; the CLI exits 2."""


class ManifestError(BadInputError):
    """The package manifest is missing, malformed or points at files that do not exist."""


class VarsError(BadInputError):
    """Vars rejected by the package's argument schema (named var and rule per problem)."""


class RoleLayoutError(BadInputError):
    """A directory that is not a usable Ansible role."""


class AgentError(PackageError):
    """The agent could not run the stages (runner failure, host unreachable); exit 1."""
