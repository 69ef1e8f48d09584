"""No import cycle in omni/ and flows/, and no import from a higher layer (omni.LAYERS).

A small AST walk rather than import-linter: its layers contract says nothing
of a cycle between two modules of one layer, and every import counts here,
function-local ones included (a cycle hidden in a function body is still a
cycle: it only moves the ImportError to the first call).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from omni import ENGINE_LIBRARIES, ENGINE_SIDE, LAYERS, PREFECT

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
            # `from omni.store import reading` imports the module omni.store.reading
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


def subpackages(root: Path = REPO) -> dict[str, Path]:
    """Every subpackage of omni/ and flows/ (the roots aside): name -> its __init__.py."""
    found = module_files(root, PACKAGES)
    return {name: path for name, path in found.items() if path.name == "__init__.py" and name not in PACKAGES}


def runs_no_code(path: Path) -> bool:
    """The file is a docstring alone (or empty)."""
    body = ast.parse(path.read_text()).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


def test_no_import_from_a_higher_layer() -> None:
    empty = frozenset(name for name, path in subpackages().items() if runs_no_code(path))
    problems = layer_problems(import_graph(REPO), packages=empty)
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


def test_every_subpackage_says_its_job_and_runs_no_code() -> None:
    """A subpackage's docstring says its job and its modules' layers; its
    ``__init__`` runs nothing, so importing one module of it imports no other
    (the engine side's packages and spec's reader, which run code, are named
    in LAYERS and held to their layer like any module)."""
    named = {prefix for _, prefixes in LAYERS for prefix in prefixes}
    for name, path in subpackages().items():
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert len(doc.split()) >= 12, f"{path}: say in its docstring what the subpackage does and may import"
        assert runs_no_code(path) or name in named, f"{path} runs code: move it into a module, or name {name} in LAYERS"


def outside_imports(path: Path) -> set[str]:
    """The top-level names of everything a file imports (function-local too), relative imports aside."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def engine_side_problems(root: Path = REPO, engine_side=ENGINE_SIDE, libraries=ENGINE_LIBRARIES) -> list[str]:
    """Imports of engine-side modules that an engine env cannot satisfy: any
    third-party package but the engine libraries, any omni module not engine-side."""
    modules = module_files(root, ("omni",))

    def engine_side_module(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in engine_side)

    problems = []
    for name, path in modules.items():
        if not engine_side_module(name):
            continue
        for target in sorted(outside_imports(path)):
            top = target.split(".")[0]
            if top == "omni":
                if target == "omni" or target in ("omni.__version__", "omni.REPO_ROOT"):
                    continue
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if not engine_side_module(target):
                    problems.append(f"{name} (engine side) imports {target}, which an engine env does not hold")
            elif top not in sys.stdlib_module_names and top not in libraries:
                problems.append(f"{name} (engine side) imports {top}, neither the standard library nor an engine's")
    return problems


def prefect_problems(root: Path = REPO, allowed=PREFECT) -> list[str]:
    modules = module_files(root, PACKAGES)
    return [
        f"{name} imports Prefect: only {', '.join(allowed)} do (omni.PREFECT)"
        for name, path in sorted(modules.items())
        if not any(name == a or name.startswith(a + ".") for a in allowed)
        and any(t == "prefect" or t.startswith("prefect.") for t in outside_imports(path))
    ]


def test_the_engine_side_imports_only_the_standard_library_its_engines_and_itself() -> None:
    assert engine_side_problems() == []


def test_prefect_is_imported_only_where_the_layers_say() -> None:
    assert prefect_problems() == []


MAX_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(REPO)): n
        for path in module_files(REPO, PACKAGES).values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"cut these along the jobs they hold: {long}"


def test_docs_architecture_lists_every_module() -> None:
    """Every module by its path, in backticks; a package's docstring-only
    ``__init__`` is its heading, not a module."""
    text = (REPO / "docs" / "architecture.md").read_text()
    missing = sorted(
        str(path.relative_to(REPO))
        for path in module_files(REPO, PACKAGES).values()
        if f"`{path.relative_to(REPO)}`" not in text and not (path.name == "__init__.py" and runs_no_code(path))
    )
    assert missing == [], "docs/architecture.md's tables miss: " + ", ".join(missing)


def test_the_rule_checks_find_what_they_forbid(tmp_path: Path) -> None:
    pkg = tmp_path / "omni"
    (pkg / "engines").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engines" / "__init__.py").write_text("")
    (pkg / "engines" / "x.py").write_text(
        "import json\nimport numpy\ndef f():\n    import pandas\n    from omni.store import rows\n"
    )
    (pkg / "store").mkdir()
    (pkg / "store" / "__init__.py").write_text("")
    (pkg / "store" / "rows.py").write_text("from prefect import flow\n")
    assert engine_side_problems(tmp_path, ("omni.engines",), frozenset({"numpy"})) == [
        "omni.engines.x (engine side) imports omni.store.rows, which an engine env does not hold",
        "omni.engines.x (engine side) imports pandas, neither the standard library nor an engine's",
    ]
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "__init__.py").write_text("")
    assert prefect_problems(tmp_path, ("flows",)) == ["omni.store.rows imports Prefect: only flows do (omni.PREFECT)"]
