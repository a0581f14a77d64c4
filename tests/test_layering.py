"""The package is cut into layers that import one way (docs/design.md, "Layers").

Every module under seq2seq/ belongs to one subpackage of ``LAYERS``; a module imports only
from its own subpackage (by module path) and from the subpackages below it (through their
``__init__``, which names the public API). Lazy imports inside functions count. There are no
import cycles, within a subpackage or across them.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "seq2seq"

# Lowest first: a layer may import the layers before it, never one after it.
LAYERS = [
    "core",
    "config",
    "data",
    "model",
    "export",
    "decode",
    "evaluate",
    "documents",
    "train",
    "serve",
    "cli",
]


def modules() -> dict[str, Path]:
    """Dotted name (``decode.beam``) -> file, for every module below the top package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts == ("__init__",):
            continue
        found[".".join(p for p in parts if p != "__init__") or "__init__"] = path
    return found


def seq2seq_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module below seq2seq, imported names) for each seq2seq import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("seq2seq."):
                found.append(
                    (node.lineno, node.module[len("seq2seq.") :], [a.name for a in node.names])
                )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("seq2seq."):
                    found.append((node.lineno, alias.name[len("seq2seq.") :], []))
    return found


def package_homes(package: str) -> dict[str, str]:
    """The public names of a subpackage -> their home module (``decode.translator``)."""
    module = importlib.import_module(f"seq2seq.{package}")
    return {name: f"{package}.{home}" for name, home in module._HOMES.items()}


def import_graph() -> dict[str, set[str]]:
    """Module -> the seq2seq modules it imports; a package import resolves to the home module."""
    graph: dict[str, set[str]] = {}
    homes: dict[str, dict[str, str]] = {}
    for name, path in modules().items():
        deps = set()
        for _, target, names in seq2seq_imports(path):
            if target in LAYERS:  # through the package's public API
                table = homes.setdefault(target, package_homes(target))
                deps.update(table[n] for n in names if n in table)
            else:
                deps.add(target)
        graph[name] = deps - {name}
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


def test_every_module_sits_in_a_layer():
    names = modules()
    assert len(names) > 40  # the walk finds the subpackages' modules, not nothing
    stray = [n for n in names if n.split(".")[0] not in LAYERS]
    assert not stray, f"modules outside every layer: {stray} (add their package to LAYERS)"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYERS)


def test_no_lower_layer_imports_a_higher_one():
    wrong = []
    for name, path in modules().items():
        own = LAYERS.index(name.split(".")[0])
        for line, target, _ in seq2seq_imports(path):
            layer = target.split(".")[0]
            if layer in LAYERS and LAYERS.index(layer) > own:
                wrong.append(f"seq2seq/{path.relative_to(PACKAGE)}:{line} imports seq2seq.{target}")
    assert not wrong, "\n".join(wrong)


def test_imports_go_through_the_public_api_across_packages_and_by_module_within():
    wrong = []
    for name, path in modules().items():
        own = name.split(".")[0]
        if name == own or name.endswith("__main__"):
            continue  # a package's plumbing: its lazy exports, ``python -m``
        for line, target, _ in seq2seq_imports(path):
            package = target.split(".")[0]
            where = f"seq2seq/{path.relative_to(PACKAGE)}:{line}"
            if package == own and target == own:
                wrong.append(f"{where} imports its own package (use the module: seq2seq.{own}.x)")
            elif package != own and target != package:
                wrong.append(f"{where} imports seq2seq.{target} (use seq2seq.{package})")
    assert not wrong, "\n".join(wrong)


def test_every_public_name_resolves():
    for package in LAYERS:
        module = importlib.import_module(f"seq2seq.{package}")
        assert module.__doc__ and module.__doc__.strip(), f"seq2seq.{package} has no docstring"
        assert sorted(module.__all__) == sorted(module._HOMES)
        for name in module.__all__:
            assert getattr(module, name) is not None, f"seq2seq.{package}.{name}"


def test_no_import_cycles():
    graph = import_graph()
    assert {"decode.translator", "decode.engines", "decode.options", "train.module"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_shared_protocol_lives_below_both():
    graph = import_graph()
    for engine in ("decode.torch_engine", "decode.ctranslate2_engine", "decode.onnx_engine"):
        assert "decode.translator" not in graph[engine]
        assert "decode.options" in graph[engine]
    assert "train.trainer" not in graph["train.module"]
