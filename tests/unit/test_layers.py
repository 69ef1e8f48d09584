"""No import cycle in omni/ and flows/, and no import from a higher layer (omni.LAYERS).

A small AST walk rather than import-linter: its layers contract says nothing
of a cycle between two modules of one layer, and every import counts here,
function-local ones included (a cycle hidden in a function body is still a
cycle: it only moves the ImportError to the first call).
"""

from __future__ import annotations

import ast
from pathlib import Path

from omni import LAYERS

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("omni", "flows")


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every .py below the packages."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imported(tree: ast.AST, modules: dict[str, Path], here: str) -> set[str]:
    """The known modules a file imports, anywhere in it (functions included)."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = here if modules[here].name == "__init__.py" else here.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(known(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x / from .x import y
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(known(base))
            # `from omni import store` imports the module omni.store.dataset
            names.update(known(f"{base}.{alias.name}") for alias in node.names if f"{base}.{alias.name}" in modules)
    names.discard(None)
    names.discard(here)
    return names


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = module_files(root, packages)
    return {name: imported(ast.parse(path.read_text(), str(path)), modules, name) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module (Tarjan), as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def layer_of(module: str, layers=LAYERS) -> int | None:
    """Index of the layer whose longest prefix names the module; None if no layer names it."""
    best = None
    for rank, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return None if best is None else best[0]


def layer_problems(graph: dict[str, set[str]], layers=LAYERS, packages: frozenset[str] = frozenset()) -> list[str]:
    """Imports against the layers. Importing a subpackage's ``__init__`` (in
    ``packages``) counts for nothing: each is a docstring alone
    (:func:`test_every_subpackage_says_its_job_and_runs_no_code`)."""
    roots = {"omni", "flows"} | set(packages)  # the package roots: version, REPO_ROOT, LAYERS
    problems = []
    for module in sorted(graph):
        if module in roots:
            continue
        rank = layer_of(module, layers)
        if rank is None and module in packages:
            continue
        if rank is None:
            problems.append(f"{module} is in no layer: add it to omni.LAYERS (omni/__init__.py)")
            continue
        for target in sorted(graph[module] - roots):
            target_rank = layer_of(target, layers)
            if target_rank is not None and target_rank > rank:
                problems.append(
                    f"{module} ({layers[rank][0]}) imports {target} ({layers[target_rank][0]}), a higher layer"
                )
    return problems


def test_no_import_cycle() -> None:
    cycles = find_cycles(import_graph(REPO))
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def subpackages(root: Path = REPO) -> frozenset[str]:
    return frozenset(name for name, path in module_files(root, PACKAGES).items() if path.name == "__init__.py")


def test_no_import_from_a_higher_layer() -> None:
    problems = layer_problems(import_graph(REPO), packages=subpackages() - {"omni", "flows"})
    assert problems == [], "\n".join(problems)


def test_the_check_finds_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "omni"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from omni.b import thing\n")
    (pkg / "b.py").write_text("def thing():\n    from omni import a\n    return a\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from . import d\n")
    (pkg / "sub" / "d.py").write_text("from .c import x\n")
    (pkg / "e.py").write_text("import omni.a\n")
    graph = import_graph(tmp_path, ("omni",))
    assert graph["omni.b"] == {"omni", "omni.a"}  # the package root too: its __init__ runs
    assert find_cycles(graph) == [["omni.a", "omni.b"], ["omni.sub.c", "omni.sub.d"]]
    (pkg / "b.py").write_text("def thing():\n    return 1\n")
    (pkg / "sub" / "d.py").write_text("x = 1\n")
    assert find_cycles(import_graph(tmp_path, ("omni",))) == []


def test_the_check_finds_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "omni"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from omni.high import g\n")
    (pkg / "high.py").write_text("from omni.low import f\n")
    (pkg / "stray.py").write_text("")
    layers = (("bottom", ("omni.low",)), ("top", ("omni.high",)))
    assert layer_problems(import_graph(tmp_path, ("omni",)), layers) == [
        "omni.low (bottom) imports omni.high (top), a higher layer",
        "omni.stray is in no layer: add it to omni.LAYERS (omni/__init__.py)",
    ]
