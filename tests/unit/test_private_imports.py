"""Tests use the product through its public names: no test imports, reads or patches a name that
starts with ``_`` from a product module (``from nodewright_bridge.x import _y``, ``x._y``,
``monkeypatch.setattr(x, "_y", ...)``, ``mock.patch("nodewright_bridge.x._y")``). A private
helper is tested through the public function that uses it, or made public when it is a real
contract. Test-local helpers named ``_x`` are fine: only product modules are checked.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

THIS = Path(__file__).resolve()
ROOT = THIS.parents[2]
PRODUCT = ("lifecycle", "playbook_adapter", "nodewright_bridge", "ansible_collections")
TESTS = (
    ROOT / "tests",
    ROOT / "collections" / "ansible_collections" / "nodewright" / "bridge" / "tests",
)
# (test file, private name used) -> why it is still there. An entry no longer used fails too.
ALLOWED: dict[tuple[str, str], str] = {}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def product(module: str) -> bool:
    return module.partition(".")[0] in PRODUCT


def private_uses(source: str) -> Iterator[tuple[int, str]]:
    """(line, dotted product name) of every private product name ``source`` uses."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> the product module or name it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if product(alias.name):
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        top = alias.name.partition(".")[0]
                        bound[top] = top
                    if any(private(part) for part in alias.name.split(".")):
                        yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not product(node.module):
                continue
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                bound[alias.asname or alias.name] = name
                if any(private(part) for part in name.split(".")):
                    yield node.lineno, name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain = [node.attr]
            root = node.value
            while isinstance(root, ast.Attribute):
                chain.append(root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                yield node.lineno, ".".join([bound[root.id], *reversed(chain)])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if " " not in text and product(text) and any(private(p) for p in text.split(".")):
                yield node.lineno, text  # mock.patch("nodewright_bridge.x._y")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            args = node.args
            if node.func.attr in ("setattr", "getattr", "delattr", "hasattr") and len(args) >= 2:
                target, attr = args[0], args[1]
                if (
                    isinstance(target, ast.Name)
                    and target.id in bound
                    and isinstance(attr, ast.Constant)
                    and isinstance(attr.value, str)
                    and private(attr.value)
                ):
                    yield node.lineno, f"{bound[target.id]}.{attr.value}"


def test_the_scanner_finds_each_kind_of_private_use() -> None:
    source = """
import nodewright_bridge.k8s.transport as transport
from lifecycle import stages
from lifecycle.stages import _plan, public
from playbook_adapter import _hidden
import nodewright_bridge

def _local_helper(): pass

transport._retry_after(None)
nodewright_bridge.k8s.rest._x
stages._internal.attr
public._field
monkeypatch.setattr(stages, "_clock", None)
mock.patch("nodewright_bridge.runtime.manager._tick")
_local_helper()
transport.closed_by_peer
stages.__name__
other._private
"""
    assert sorted(private_uses(source)) == [
        (4, "lifecycle.stages._plan"),
        (5, "playbook_adapter._hidden"),
        (10, "nodewright_bridge.k8s.transport._retry_after"),
        (11, "nodewright_bridge.k8s.rest._x"),
        (12, "lifecycle.stages._internal"),
        (13, "lifecycle.stages.public._field"),
        (14, "lifecycle.stages._clock"),
        (15, "nodewright_bridge.runtime.manager._tick"),
    ]


def test_no_test_uses_a_private_product_name() -> None:
    found: dict[tuple[str, str], list[int]] = {}
    for base in TESTS:
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts or "output" in path.parts or path == THIS:
                continue  # this file names private uses as examples
            where = str(path.relative_to(ROOT))
            for line, name in private_uses(path.read_text()):
                found.setdefault((where, name), []).append(line)
    unexpected = [
        f"{where}:{lines[0]}: {name}"
        for (where, name), lines in sorted(found.items())
        if (where, name) not in ALLOWED
    ]
    assert not unexpected, "tests use private product names:\n" + "\n".join(unexpected)
    stale = [key for key in ALLOWED if key not in found]
    assert not stale, f"allowed private uses no test has any more (remove them): {stale}"
