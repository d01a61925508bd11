"""The shape of the package's imports, read from the source with `ast` (nothing imported): no module of the library
imports from the command layer, no two modules import each other at module level, directly or round a circle, and
no two folders import each other (issue 52), counting the imports inside functions too.

A module-level import is one that runs when the module is imported: not one inside a function (those are kept for
what `retromae --help` must not load) and not one under `if TYPE_CHECKING:`. `python tests/test_import_graph.py
[SRC]` prints the circles of a source tree (`src` by default), as the docs' "before and after" count was measured.
A folder is a package directly under `retromae/` (`retromae.training`, with everything below it); each module at the
root (`retromae.cli`) counts as a folder of its own.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
COMMAND_LAYER = ("retromae.commands", "retromae.cli")  # the parsers and the commands' thin runners
# Circles closed only by imports inside functions (those keep `--help` free of torch), each as its sorted modules.
# The test fails on any other circle, so this list can only shrink: the objectives' typed options remove the first.
# The house plan of docs/contributing.md, top floor first: a folder imports only folders on lower floors (issue 64).
FLOORS = (
    ("__main__",),
    ("cli",),
    ("commands",),
    ("api", ""),  # "" is the package itself, retromae/__init__.py
    ("adaptation", "workflows", "preflight"),
    ("pretraining",),
    ("reranking", "evaluation"),
    ("finetuning", "objectives"),
    ("training", "retrieval"),
    ("losses",),
    ("models",),
    ("backbones", "data"),
    ("runtime",),
)
KNOWN_FUNCTION_CYCLES = {
    ("retromae.models.encoder", "retromae.models.encoder_config"),  # EncoderOptions.load_encoder builds an Encoder
    # load_masked_lm lowercases as a sentence-transformers folder declares, by the encoder's reading of such folders
    ("retromae.models.encoder", "retromae.models.encoder_config", "retromae.models.masked_lm"),
}


def module_files(src: Path = SRC) -> dict[str, Path]:
    """Every module of the `retromae` package under `src`: dotted name → file (a package is its __init__.py)."""
    files = {}
    for path in sorted((src / "retromae").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(body: list[ast.stmt], module_level: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of `body`: with `module_level`, those that run on import (not in functions, not under
    `if TYPE_CHECKING`); without it, those inside functions."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found += [node] if module_level else []
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [] if module_level else [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            found += _imports(node.orelse, module_level)
        elif not isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign, ast.Return)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                found += _imports(getattr(node, field, []), module_level)
    return found


def imported_modules(name: str, path: Path, known: dict[str, Path], module_level: bool = True) -> set[str]:
    """The `retromae` modules that module `name` imports (`from retromae.x import y` imports `retromae.x.y` when that
    is a module, else `retromae.x`); relative imports are resolved against the module's package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8")).body, module_level):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
            continue
        base = node.module or ""
        if node.level:
            base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
        targets |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    return {target for target in targets if target in known}


def import_graph(src: Path = SRC, module_level: bool = True) -> dict[str, set[str]]:
    known = module_files(src)
    return {name: imported_modules(name, path, known, module_level) for name, path in known.items()}


def full_graph(src: Path = SRC, with_function_imports: bool = False) -> dict[str, set[str]]:
    """The module-level import graph; with `with_function_imports`, the imports inside functions added."""
    graph = import_graph(src)
    if with_function_imports:
        inside = import_graph(src, module_level=False)
        graph = {name: targets | inside[name] for name, targets in graph.items()}
    return graph


def folder_of(name: str, src: Path = SRC) -> str:
    """The folder a module lives in: `retromae.training.loop` → `retromae.training`; a root module is its own."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (src / "retromae" / parts[1]).is_dir() else name


def folder_graph(src: Path = SRC, with_function_imports: bool = True) -> dict[str, set[str]]:
    """Which folders import which (a folder's imports of itself left out)."""
    graph: dict[str, set[str]] = {}
    for name, targets in full_graph(src, with_function_imports).items():
        folder = folder_of(name, src)
        graph.setdefault(folder, set()).update(folder_of(target, src) for target in targets)
    return {folder: targets - {folder} for folder, targets in graph.items()}


def strongly_connected(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Each strongly connected component of more than one node (or a node with an edge to itself), as its sorted
    names (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: set[tuple[str, ...]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1 or node in graph[node]:
                cycles.add(tuple(sorted(component)))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in graph:
        if node not in index:
            visit(node)
    return cycles


def import_cycles(src: Path = SRC, with_function_imports: bool = False) -> set[tuple[str, ...]]:
    """The module-level import circles (with `with_function_imports`, counting the imports inside functions too),
    each as its sorted module names."""
    return strongly_connected(full_graph(src, with_function_imports))


def folder_cycles(src: Path = SRC, with_function_imports: bool = True) -> set[tuple[str, ...]]:
    """The circles between folders, each as its sorted folder names."""
    return strongly_connected(folder_graph(src, with_function_imports))


def _in_command_layer(name: str) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in COMMAND_LAYER)


def test_no_library_module_imports_the_command_layer():
    """Only the command layer imports `retromae.commands`, at module level or inside a function."""
    graphs = import_graph(), import_graph(module_level=False)
    upward = sorted(f"{name} → {target}" for graph in graphs for name, targets in graph.items() for target in targets
                    if not _in_command_layer(name) and target.startswith("retromae.commands"))
    assert upward == [], f"library modules import the command layer: {upward}"


def test_no_module_level_import_cycles():
    assert import_cycles() == set()


def test_no_function_level_import_cycles_beyond_the_known_ones():
    cycles = import_cycles(with_function_imports=True)
    assert cycles <= KNOWN_FUNCTION_CYCLES, f"new import circles: {sorted(cycles - KNOWN_FUNCTION_CYCLES)}"


def test_no_folder_imports_a_folder_that_imports_it_back():
    """Issue 52: the folders stand in floors (docs/contributing.md), counting the imports inside functions too."""
    assert folder_cycles() == set()


def test_cycle_finder_sees_a_circle(tmp_path):
    package = tmp_path / "retromae"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from retromae.b import f\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nfrom . import c\nif TYPE_CHECKING:\n"
                                  "    from retromae import d\n")
    (package / "c.py").write_text("import retromae.a\n\ndef g():\n    from retromae import d\n")
    (package / "d.py").write_text("from retromae.b import f\n")
    assert import_cycles(tmp_path) == {("retromae.a", "retromae.b", "retromae.c")}
    assert import_graph(tmp_path, module_level=False)["retromae.c"] == {"retromae.d"}


def test_folder_cycle_finder_sees_a_circle_between_folders(tmp_path):
    for folder in ("low", "high"):
        (tmp_path / "retromae" / folder).mkdir(parents=True)
        (tmp_path / "retromae" / folder / "__init__.py").write_text("")
    (tmp_path / "retromae" / "__init__.py").write_text("")
    (tmp_path / "retromae" / "low" / "a.py").write_text("def f():\n    from retromae.high.b import g\n")
    (tmp_path / "retromae" / "high" / "b.py").write_text("from retromae.low import a\n")
    (tmp_path / "retromae" / "cli.py").write_text("import retromae.high.b\n")
    assert folder_cycles(tmp_path, with_function_imports=False) == set()
    assert folder_cycles(tmp_path) == {("retromae.high", "retromae.low")}
    assert folder_graph(tmp_path)["retromae.cli"] == {"retromae.high"}


if __name__ == "__main__":
    tree = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC
    for label, everywhere in (("module level", False), ("with imports inside functions", True)):
        found = sorted(import_cycles(tree, everywhere), key=len)
        print(f"{label}: {len(found)} circle(s)", *(f"  {len(cycle)}: {' '.join(cycle)}" for cycle in found), sep="\n")
        folders = sorted(folder_cycles(tree, everywhere), key=len)
        print(f"  between folders: {len(folders)} circle(s)", *(f"    {len(c)}: {' '.join(c)}" for c in folders),
              sep="\n")


def floor_of(folder: str) -> int:
    """The floor of a folder (`retromae.training` → 7) in `FLOORS`; a folder not in the plan fails the test."""
    name = folder.removeprefix("retromae").lstrip(".")
    return next(number for number, floor in enumerate(FLOORS) if name in floor)


def test_every_folder_has_a_floor_in_the_house_plan():
    assert sorted(folder for folder in folder_graph() if not any(
        folder.removeprefix("retromae").lstrip(".") in floor for floor in FLOORS)) == []


def test_every_import_goes_down_the_house_plan():
    """Issue 64: a folder imports only the floors below its own, counting the imports inside functions; no two
    folders of one floor import each other (so no exception for the losses: they have their own floor)."""
    sideways_or_up = sorted(f"{folder} → {target}" for folder, targets in folder_graph().items() for target in targets
                            if floor_of(target) <= floor_of(folder))
    assert sideways_or_up == []


def test_the_objectives_do_not_stand_on_the_loop():
    """Issue 64: the objectives take their losses from `retromae.losses`, not from `retromae.training`."""
    assert "retromae.training" not in folder_graph()["retromae.objectives"]


# The libraries an import inside a function may load without a comment: each is heavy (torch, or seconds to import) or
# optional, so keeping it out of `retromae --help` and out of the commands that do not use it is its own reason.
HEAVY = ("torch", "transformers", "accelerate", "deepspeed", "sentence_transformers", "matplotlib", "mteb",
         "datasets", "faiss", "bm25s", "liger_kernel", "tokenizers", "safetensors")


def uncommented_function_imports(src: Path = SRC) -> list[str]:
    """"path:line module" of each import inside a function that loads none of `HEAVY` and says not why: no comment
    on its lines, on the lines of the imports just above it, or on the line above those."""
    found = []
    for path in sorted((src / "retromae").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in _imports(ast.parse("\n".join(lines)).body, module_level=False):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [alias.name for alias in node.names]
            if all(name.split(".")[0] in HEAVY for name in names):
                continue
            first = node.lineno - 1
            while first > 0 and lines[first - 1].strip().startswith(("from ", "import ")):
                first -= 1
            said = any("#" in line for line in lines[max(first - 1, 0):node.end_lineno])
            if not said:
                found.append(f"{path.relative_to(src)}:{node.lineno} {names[0]}")
    return found


def test_every_import_inside_a_function_says_why():
    """Issue 64: an import inside a function is kept only where it holds a heavy library back (docs/contributing.md),
    with its reason in a comment, unless what it imports is one of `HEAVY`; every other import is at the top."""
    assert uncommented_function_imports() == []


def test_the_import_rule_sees_an_import_without_its_reason(tmp_path):
    (tmp_path / "retromae").mkdir()
    (tmp_path / "retromae" / "m.py").write_text("def f():\n    from retromae.a import b\n    return b\n\n\n"
                                                "def g():\n    import torch\n    from retromae.c import d  # said\n")
    assert uncommented_function_imports(tmp_path) == ["retromae/m.py:2 retromae.a"]

