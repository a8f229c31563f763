"""The architecture, checked: layers import only downwards, and no module imports itself round a loop.

Every import counts, including those under `if TYPE_CHECKING:` and inside functions: a type-only
arrow that runs upwards is still a lower layer naming a higher one. The ranks are the README's
architecture picture; a new package must be given its place here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.imports import import_graph, layer_of

REPO = Path(__file__).resolve().parents[1]

# (package or module prefix, rank): the most specific prefix wins. A module may import only modules
# of a lower rank, or of its own prefix.
LAYERS: list[tuple[str, int]] = [
    ("filters", 0),
    ("broker_core.vocabulary", 0),
    ("broker_core.compiled", 0),
    ("broker_core.histogram", 0),
    ("broker_core.amqp", 1),
    ("broker_core.errors", 2),
    ("broker_core.security", 3),
    ("broker_core.journal", 3),
    ("broker_core.config", 4),
    ("broker_core", 5),
    ("connections", 6),
    ("mirror", 7),
    ("spark_dr", 8),
    ("amqp_mirror", 9),
]


def test_every_import_points_down() -> None:
    graph = import_graph(REPO)
    violations = []
    for module, imports in graph.items():
        here = layer_of(module, LAYERS)
        for other, line in imports:
            there = layer_of(other, LAYERS)
            if here is None or there is None or here[0] == there[0]:
                continue
            if there[1] >= here[1]:
                violations.append(f"{module}:{line} imports {other} ({here[0]} -> {there[0]})")
    assert not violations, "\n".join(violations)


def test_no_import_loops() -> None:
    graph = {m: {o for o, _ in imports if o in _modules(REPO)} for m, imports in import_graph(REPO).items()}
    loops = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for o in sorted(graph.get(m, ())):
            if state.get(o) == 1:
                loops.append(" -> ".join([*path[path.index(o) :], o]))
            elif o not in state:
                visit(o)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not loops, "\n".join(loops)


def test_every_package_has_a_layer() -> None:
    unplaced = sorted(m for m in _modules(REPO) if layer_of(m, LAYERS) is None)
    assert unplaced == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from connections.manager import X", ["connections.manager"]),
        ("if TYPE_CHECKING:\n    from mirror.source import S", ["mirror.source"]),
        ("def f():\n    import spark_dr.cli", ["spark_dr.cli"]),
        ("from . import wire", ["pkg.wire"]),
    ],
)
def test_the_checker_sees_every_kind_of_import(tmp_path: Path, source: str, expected: list[str]) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "wire.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(source)
    graph = import_graph(tmp_path, packages=("pkg",))
    found = [
        o for o, _ in graph["pkg.mod"] if o.split(".")[0] in {"connections", "mirror", "spark_dr", "pkg"}
    ]
    assert found == expected
    assert ast.parse(source)  # the sample itself is valid Python


def _modules(root: Path) -> set[str]:
    return set(import_graph(root))
