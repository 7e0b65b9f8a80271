"""The import rules of docs/architecture.md, read from the source with `ast` (nothing is imported):
the runtime knows nothing of the nodes, the shared layers import downwards only, no engine imports
another engine, and no module reaches itself through its imports (every import counts, including
those under TYPE_CHECKING and inside functions: a cycle there is still a tangle to read)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "nodes")
# Each shared layer and what it may import (besides the standard library and third-party packages).
LAYERS = {
    "runtime": {"runtime"},
    "nodes.formats": {"runtime", "nodes.formats"},
    "nodes.blocks": {"runtime", "nodes.formats", "nodes.blocks"},
    "nodes.pack": {"runtime", "nodes.formats", "nodes.blocks", "nodes.pack"},
    "nodes.script": {"runtime", "nodes.formats", "nodes.blocks", "nodes.pack", "nodes.script"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[module_name(path)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports (relative imports resolved; `from . import x` names x)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")
            base = base[:len(base) - node.level + 1]
            stem = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{stem}.{alias.name}"
                targets.add(full if full in known else stem)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("mizuoto",):
            targets.add(node.module.removeprefix("mizuoto."))
        elif isinstance(node, ast.Import):
            targets.update(a.name.removeprefix("mizuoto.") for a in node.names if a.name.startswith("mizuoto."))
    return {t for t in targets if t in known and t != name}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def engines() -> set[str]:
    from mizuoto import nodes
    return {f"nodes.{e}" for e in nodes.engine_folders()}


def owner(module: str) -> str:
    """The layer or engine a module belongs to."""
    parts = module.split(".")
    return parts[0] if parts[0] == "runtime" else ".".join(parts[:2])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]; counter[0] += 1
                    stack.append(child); on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop(); on_stack.discard(member); component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_graph_sees_relative_and_lazy_imports(graph):
    assert "runtime.handles" in graph["runtime.manager"]
    assert "nodes.formats.download" in graph["nodes.pack.registry"]
    assert "nodes.pack.pipeline" in graph["nodes.pack.verify"]
    assert "nodes.formats.folders" in graph["nodes"]                  # `from .formats import folders` in a function
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles(graph):
    assert cycles(graph) == []


def test_shared_layers_import_only_downwards(graph):
    wrong = [f"{m} imports {t}" for m, targets in graph.items() if owner(m) in LAYERS
             for t in targets if owner(t) not in LAYERS[owner(m)]]
    assert wrong == []


def test_no_engine_imports_another_engine(graph):
    """Engines share code through the shared layers only: an engine importing another's would tie their
    releases and their tests together."""
    names = engines()
    assert {"nodes.hibari", "nodes.qwen3_tts", "nodes.indextts2"} <= names
    wrong = [f"{m} imports {t}" for m, targets in graph.items() if owner(m) in names
             for t in targets if owner(t) in names and owner(t) != owner(m)]
    assert wrong == []


def test_nothing_of_the_pack_imports_its_former_home(graph):
    wrong = [m for m, targets in graph.items() if any(owner(t) == "nodes.common" for t in targets)]
    assert wrong == []


def test_the_former_home_still_imports_as_the_same_modules():
    """Code written against nodes/common/ keeps working: each name is the moved module itself."""
    import importlib

    from mizuoto.nodes import common
    from mizuoto.nodes.pack import pipeline

    assert importlib.import_module("mizuoto.nodes.common.pipeline") is pipeline
    from mizuoto.nodes.common.registry import Download
    from mizuoto.nodes.formats.download import Download as moved
    assert Download is moved
    left = {p.stem for p in (ROOT / "nodes" / "common").glob("*.py")} - {"__init__"}
    assert left == set()
    for layer, names in common.MOVED.items():
        assert set(names) <= {p.stem for p in (ROOT / "nodes" / layer).glob("*.py")}
