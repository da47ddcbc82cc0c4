"""Import boundaries of DESIGN.md: torch only in train/ and comm/bench.py, and the packages in layers.

The layers, lowest first (a module imports its own layer and the ones below, never one above):

1. ``units`` and ``errors`` (and the package root, which holds ``__version__``);
2. ``core``: shared types, stdlib and pydantic only;
3. ``report``: the renderer only (a self-contained HTML file of tables, prose and matplotlib charts),
   low so that every capability can render its own results with it;
4. ``catalog``: the facts and their loader;
5. ``perf``, ``comm`` and ``fabric``: the models of a step, its collectives and the network;
6. ``ft``, ``sched``, ``train``, ``diagnose`` and ``watch``: the capabilities built on those models;
7. ``cli``: one click group per capability.

A capability's report views (its tables and charts rendered with ``report``) live beside it, in its own
package, so they sit in its layer. Within a layer, packages may import each other but never in a cycle:
the package graph is acyclic, so each layer has an order too (``fabric`` < ``comm`` < ``perf``, ...).
Imports are read with ``ast`` from every module, including those inside functions and ``TYPE_CHECKING``
blocks: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).parents[2] / "src" / "mfukit"
TORCH_ALLOWED = ("train/", "comm/bench.py")
ROOT = "mfukit"
LAYERS: tuple[tuple[str, ...], ...] = (
    (ROOT, "units", "errors"),
    ("core",),
    ("report",),
    ("catalog",),
    ("perf", "comm", "fabric"),
    ("ft", "sched", "train", "diagnose", "watch"),
    ("cli",),
)
LAYER_OF = {package: index for index, layer in enumerate(LAYERS) for package in layer}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in ``path``; relative imports resolved, and ``from a import b``
    also yields ``a.b`` (``b`` may be a module)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module
            yield from ((node.lineno, f"{module}.{alias.name}") for alias in node.names)


def package_of(module: str) -> str | None:
    """The mfukit package of a module name (``ROOT`` for the root and the names it defines), or None."""
    parts = module.split(".")
    if parts[0] != ROOT:
        return None
    if len(parts) == 1 or not ((SRC / parts[1]).is_dir() or (SRC / f"{parts[1]}.py").is_file()):
        return ROOT
    return parts[1]


def package_edges() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the ``file:line imports module`` that make the edge (one per import
    statement)."""
    edges: dict[str, dict[str, dict[str, str]]] = {}
    for path in sorted(SRC.rglob("*.py")):
        source = package_of(module_name(path))
        assert source is not None
        for line, module in imports(path):
            target = package_of(module)
            if target is not None and target != source:
                where = f"{path.relative_to(SRC).as_posix()}:{line}"
                edges.setdefault(source, {}).setdefault(target, {}).setdefault(
                    where, f"{where} imports {module}"
                )
    return {
        source: {target: list(wheres.values()) for target, wheres in targets.items()}
        for source, targets in edges.items()
    }


def test_torch_only_where_allowed() -> None:
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith(TORCH_ALLOWED):
            continue
        bad = {name for _, name in imports(path) if name == "torch" or name.startswith("torch.")}
        assert not bad, f"{relative} imports {bad}"


def test_every_package_has_a_layer() -> None:
    packages = {path.name for path in SRC.iterdir() if (path / "__init__.py").is_file()}
    packages |= {path.stem for path in SRC.glob("*.py") if path.stem != "__init__"}
    assert packages - LAYER_OF.keys() == set(), "place each new package in LAYERS"
    assert LAYER_OF.keys() - {ROOT} - packages == set(), "LAYERS names a package that is gone"


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{where} ({source}, layer {LAYER_OF[source] + 1} -> {target}, layer {LAYER_OF[target] + 1})"
        for source, targets in package_edges().items()
        for target, wheres in targets.items()
        if LAYER_OF[target] > LAYER_OF[source]
        for where in wheres
    ]
    assert upward == [], "\n".join(upward)


def test_package_graph_is_acyclic() -> None:
    edges = package_edges()
    done: set[str] = set()

    def cycle_from(package: str, path: list[str]) -> list[str] | None:
        if package in path:
            return [*path[path.index(package) :], package]
        if package in done:
            return None
        for target in sorted(edges.get(package, {})):
            found = cycle_from(target, [*path, package])
            if found is not None:
                return found
        done.add(package)
        return None

    for package in sorted(edges):
        cycle = cycle_from(package, [])
        if cycle is not None:
            detail = "\n".join(f"  {edges[a][b][0]}" for a, b in itertools.pairwise(cycle))
            raise AssertionError(f"import cycle {' -> '.join(cycle)}:\n{detail}")
