"""Docstrings and comments point only at documents the repository has.

A pointer to a file that is not in the repository (a private design note, a section of someone's
reference) tells the next reader nothing. Two checks over the Python sources:

- no file names one of the documents that live outside the repository;
- every ``docs/<name>.md`` a docstring or comment names exists, and a section it names in quotes
  right after the path (``docs/architecture.md, "The sandbox"``) is a heading of that file.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("lifecycle", "playbook_adapter", "nodewright_bridge", "tests")

# Documents outside the repository. Written as patterns so that this file does not match itself.
OUTSIDE_DOCUMENTS = (
    re.compile(r"ARCHITECTURE\.md"),
    re.compile(r"CONTRACTS\.md"),
    re.compile(r"helper[-]notes"),
    re.compile(r"reference\s§", re.IGNORECASE),
    re.compile(r"§\s?\d"),  # a numbered section of one of them
)

DOCS_PATH = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md)\b")
# A path followed by a section title in quotes, as in the module docstring (line breaks folded).
DOCS_SECTION = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md),? \"([^\"]+)\"")
HEADING = re.compile(r"^#+\s+(?:\d+\.\s+)?(.+?)\s*$", re.MULTILINE)


def _sources() -> Iterator[tuple[str, Path]]:
    for top in SOURCE_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "__pycache__" in path.parts or "output" in path.parts:
                continue
            yield rel, path


def _prose(text: str) -> list[str]:
    """The docstrings of a module, and its comments with consecutive lines joined."""
    found: list[str] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append(doc)
    block: list[str] = []
    last_line = -2
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if line != last_line + 1 and block:
            found.append(" ".join(block))
            block = []
        block.append(token.string.lstrip("#").strip())
        last_line = line
    if block:
        found.append(" ".join(block))
    return [" ".join(piece.split()) for piece in found]


def _headings(doc: Path) -> set[str]:
    return {m.group(1) for m in HEADING.finditer(doc.read_text(encoding="utf-8"))}


def test_no_pointer_to_a_document_outside_the_repository() -> None:
    hits: list[str] = []
    for rel, path in _sources():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(p.search(line) for p in OUTSIDE_DOCUMENTS):
                hits.append(f"{rel}:{number}: {line.strip()}")
    assert not hits, "point at docs/ or say the rule in place:\n" + "\n".join(hits)


def test_every_docs_path_and_section_named_exists() -> None:
    problems: list[str] = []
    for rel, path in _sources():
        for text in _prose(path.read_text(encoding="utf-8")):
            for name in DOCS_PATH.findall(text):
                if not (ROOT / "docs" / name).is_file():
                    problems.append(f"{rel}: docs/{name} does not exist")
            for name, title in DOCS_SECTION.findall(text):
                doc = ROOT / "docs" / name
                if doc.is_file() and title not in _headings(doc):
                    problems.append(f"{rel}: docs/{name} has no section {title!r}")
    assert not problems, "\n".join(problems)
