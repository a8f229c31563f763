"""The project's import graph, read from the source with `ast` (nothing is imported)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGES = ("amqp_mirror", "broker_core", "connections", "filters", "mirror", "spark_dr")

Graph = dict[str, list[tuple[str, int]]]  # module -> (imported module, line)


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> Graph:
    return dict(_graph(root, packages))


@cache
def _graph(root: Path, packages: tuple[str, ...]) -> tuple[tuple[str, list[tuple[str, int]]], ...]:
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            files[module] = path
    graph = []
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        imports = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imports += [(alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, is_package, node.module, node.level)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    imports.append((sub if sub in files else base, node.lineno))
        graph.append((module, imports))
    return tuple(graph)


def _absolute(module: str, is_package: bool, name: str | None, level: int) -> str:
    if level == 0:
        return name or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, name] if name else parts)


def layer_of(module: str, layers: list[tuple[str, int]]) -> tuple[str, int] | None:
    """The most specific (prefix, rank) that `module` belongs to, or None."""
    best = None
    for prefix, rank in layers:
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best[0])
        ):
            best = (prefix, rank)
    return best
