"""The import structure of src/ferrymq: no module-level import cycles, and the layer rule of the
design (lower layers never import higher ones), read from the sources with ``ast``.

Only module-level imports count: imports inside functions and under ``if TYPE_CHECKING:`` run late
or never, so they neither form a cycle at import time nor tie a layer to another at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "ferrymq"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE

# Which top-level packages of ours a package may import (itself always), as a whitelist (ALLOWED) or
# a blacklist (FORBIDDEN); a package in neither table may import anything of ours. The C accelerators
# (_native) are optional drop-in versions of protocol and store functions: below every layer.
BASE = {"_native"}
SERVERS_MAY_NOT = {"client", "messaging", "proxy", "amqp", "spark", "cli", "console", "operator", "bench"}
EDGES = {"cli", "spark"}
ALLOWED: dict[str, set[str]] = {
    "protocol": BASE,
    "store": BASE | {"protocol"},
    "net": BASE | {"protocol"},
    "client": BASE | {"protocol", "net"},
    "auth": BASE | {"protocol", "store", "net"},  # net: a front's mirror of the users asks NameServers
    "proxy": BASE | {"messaging", "protocol", "net"},  # brokers only through the MessageService
}
FORBIDDEN: dict[str, set[str]] = {
    "broker": SERVERS_MAY_NOT,
    "namesrv": SERVERS_MAY_NOT,
    "controller": SERVERS_MAY_NOT,
    "ha": SERVERS_MAY_NOT | {"broker"},  # ha/ gets what it needs from its owner, never the Broker
    "messaging": EDGES,
    "amqp": EDGES,
    "meta": EDGES,
    "metrics": EDGES,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(
    tree: ast.Module, module: str, is_package: bool, modules: set[str]
) -> list[tuple[str, int]]:
    """(imported module of ours, line) for each import run when the module is imported.

    ``from package import name`` counts as an import of the submodule package.name when there is
    one (the package's ``__init__`` runs for any submodule import, so it is no extra edge), else of
    the package itself."""
    found: list[tuple[str, int]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend((alias.name, node.lineno) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.append((sub if sub in modules else base, node.lineno))
            elif isinstance(node, ast.If) and not _is_type_checking(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.If):
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree.body)
    return [(name, line) for name, line in found if name == PACKAGE or name.startswith(PACKAGE + ".")]


def _graph() -> tuple[dict[str, dict[str, int]], dict[str, Path]]:
    """module -> {module of ours it imports at module level: line}."""
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, dict[str, int]] = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(), str(path))
        edges: dict[str, int] = {}
        for name, line in _top_level_imports(tree, module, path.name == "__init__.py", set(paths)):
            if name in paths and name != module:
                edges.setdefault(name, line)
        graph[module] = edges
    return graph, paths


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                connect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
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

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_module_level_import_cycles() -> None:
    graph, _ = _graph()
    problems = []
    for component in _cycles(graph):
        members = set(component)
        links = [
            f"    {m} -> {target} (line {line})"
            for m in component
            for target, line in sorted(graph[m].items())
            if target in members
        ]
        problems.append(f"cycle of {len(component)} modules:\n" + "\n".join(links))
    assert not problems, "module-level import cycles in src/ferrymq:\n" + "\n".join(problems)


def _layer_problems(graph: dict[str, dict[str, int]]) -> list[str]:
    problems = []
    for module, edges in sorted(graph.items()):
        layer = _layer(module)
        allowed, forbidden = ALLOWED.get(layer), FORBIDDEN.get(layer, set())
        for target, line in sorted(edges.items()):
            other = _layer(target)
            if other in ("", layer):
                continue
            if (allowed is not None and other not in allowed) or other in forbidden:
                problems.append(f"{module} line {line}: imports {target} ({layer} may not import {other})")
    return problems


def test_layers_import_only_downwards() -> None:
    problems = _layer_problems(_graph()[0])
    assert not problems, "layer rule broken:\n" + "\n".join(problems)


def test_the_checks_see_cycles_and_layer_breaches() -> None:
    """The parser and both checks on made-up input, so a broken checker cannot pass silently."""
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "from ..store import files\n"
        "if TYPE_CHECKING:\n    from ferrymq.broker import server\n"
        "def f():\n    import ferrymq.cli\n"
    )
    modules = {"ferrymq.net.b", "ferrymq.store"}
    imports = {name for name, _ in _top_level_imports(tree, "ferrymq.net.a", False, modules)}
    assert imports == {"ferrymq.net.b", "ferrymq.store"}
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    wrong = {
        "ferrymq.ha.master": {"ferrymq.broker.server": 7, "ferrymq.store": 8},
        "ferrymq.net.x": {"ferrymq.store.y": 3},
    }
    assert _layer_problems(wrong) == [
        "ferrymq.ha.master line 7: imports ferrymq.broker.server (ha may not import broker)",
        "ferrymq.net.x line 3: imports ferrymq.store.y (net may not import store)",
    ]
