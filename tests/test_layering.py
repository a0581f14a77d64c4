"""The package's modules import each other one way: no import cycles, lazy imports included.

DESIGN.md: the data flows one way, and a protocol two modules share lives below both
(seq2seq/decoding.py under translate.py and engines.py; the config comparison that both
system.py and train.py need in config.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "seq2seq"


def import_graph() -> dict[str, set[str]]:
    """Module -> the seq2seq modules it imports anywhere in its body (lazy imports count)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.startswith("seq2seq."):
                    deps.add(node.module.split(".")[1])
                elif node.module == "seq2seq":
                    deps.update(a.name for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(
                    a.name.split(".")[1] for a in node.names if a.name.startswith("seq2seq.")
                )
        graph[path.stem] = deps - {path.stem}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in graph:
                continue
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep, path)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node, [])):
            return cycle
    return None


def test_find_cycle_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    graph = import_graph()
    assert {"translate", "engines", "decoding", "system", "train"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_shared_protocol_lives_below_both():
    graph = import_graph()
    assert "translate" not in graph["engines"] and "decoding" in graph["engines"]
    assert "train" not in graph["system"]
