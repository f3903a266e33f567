"""The import graph of tandem's packages, read from the source with ``ast``, and its cycles.

Every ``import`` and ``from ... import`` counts, wherever it stands (a module body, a function body,
a ``try``), except those under ``if TYPE_CHECKING:``: an import moved into a function to dodge a
cycle still closes the cycle when the function runs, so it is an edge here. ``from pkg import name``
is an edge to ``pkg.name`` when that is a module, else to ``pkg``. Importing a module also runs its
packages' ``__init__``, but that is not counted as an edge (a package's ``__init__`` that imports its
own modules would otherwise be in a cycle with each of them).

    python -m tests.import_graph              # the cycles of every package, one line each
    python -m tests.import_graph reasoner     # those inside tandem.reasoner only

The test ``tests/test_import_cycles.py`` holds each package to no cycle.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("reasoner", "toolkit", "tasks", "client", "workers", "broker_config")
"""The repository's top-level folders, installed as ``tandem.<folder>``."""


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the packages by its dotted name (``tandem.reasoner.loop.plan``)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["tandem", *parts])] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree``, skipping the bodies of ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _target(name: str, known: dict[str, Path]) -> str | None:
    """``name`` or the closest package above it that is one of ``known``."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports (outside ``TYPE_CHECKING``)."""
    known = modules(root)
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                dotted = (f"{base}.{alias.name}" for alias in node.names)
                targets = [d if d in known else base for d in dotted]
            for target in targets:
                found = _target(target, known)
                if found is not None and found != name:
                    edges[name].add(found)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        # Iterative, so a deep chain cannot hit the recursion limit.
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def package_cycles(package: str, root: Path = ROOT) -> list[list[str]]:
    """The cycles among the modules of ``tandem.<package>`` (edges leaving it are ignored)."""
    prefix = f"tandem.{package}"
    inside = {
        name: {t for t in targets if t == prefix or t.startswith(prefix + ".")}
        for name, targets in graph(root).items()
        if name == prefix or name.startswith(prefix + ".")
    }
    return cycles(inside)


def main(argv: list[str] | None = None) -> int:
    """Print the cycles of each package named (all by default); exit 1 when there is one."""
    names = (argv if argv is not None else sys.argv[1:]) or list(PACKAGES)
    total = 0
    for package in names:
        found = package_cycles(package)
        total += len(found)
        print(f"tandem.{package}: {len(found)} cycle(s)")
        for component in found:
            print("  " + " <-> ".join(m.removeprefix(f"tandem.{package}.") for m in component))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
