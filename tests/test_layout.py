"""The package's layout (issue 52): the root keeps only its public face, functions stay short, the training loop
fits in one sitting, and the module paths before the folders still import for one release (each old name is the
module that now holds its code, the same object, and importing it warns with the new name; no file stands at an
old path)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from retromae.runtime.old_paths import OLD_PATHS

SRC = Path(__file__).resolve().parents[1] / "src"

# In a fresh interpreter: importing an old name of a public function (`retromae.finetune.run`) makes that attribute of
# `retromae` the module, as the old layout did, so the test process itself keeps its functions.
SCRIPT = """
import importlib, json, sys, warnings
from retromae.runtime.old_paths import OLD_PATHS
found = {}
for old, new in OLD_PATHS.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    found[old] = {"same": module is importlib.import_module(new) and sys.modules[old] is module,
                  "name": module.__name__, "warnings": messages}
print(json.dumps(found))
"""


def test_every_old_name_imports_warns_and_is_the_new_module():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(found) == set(OLD_PATHS)
    for old, new in OLD_PATHS.items():
        assert found[old]["same"] and found[old]["name"] == new, old
        assert found[old]["warnings"] == [f"{old} is now {new}; the old name goes in the next release"], old


def test_no_file_stands_at_an_old_path_and_every_new_path_has_one():
    for old, new in OLD_PATHS.items():
        old_path, new_path = SRC.joinpath(*old.split(".")), SRC.joinpath(*new.split("."))
        assert not old_path.with_suffix(".py").exists() and not old_path.is_dir(), old
        assert new_path.with_suffix(".py").is_file() or (new_path / "__init__.py").is_file(), new


def test_the_package_root_keeps_only_its_public_face():
    """Issue 52: at most 6 modules at the root; the rest lives in folders named for what they hold."""
    root = sorted(path.name for path in (SRC / "retromae").glob("*.py"))
    assert root == ["__init__.py", "__main__.py", "api.py", "cli.py", "preflight.py"]


def function_lengths(src: Path = SRC) -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function and method of the package, its docstring included."""
    found = []
    for path in sorted((src / "retromae").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(src)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def test_no_function_is_longer_than_40_lines():
    assert [entry for entry in function_lengths() if entry[0] > 40] == []


# The command layer prints; the library returns `runtime.console.Result`s, and its one printing module is the console.
PRINTERS = ("retromae/cli.py", "retromae/commands/", "retromae/runtime/console.py")


def library_prints(src: Path = SRC) -> list[str]:
    """"path:line" of every call of the builtin `print` in a library module (outside `PRINTERS`)."""
    found = []
    for path in sorted((src / "retromae").rglob("*.py")):
        relative = path.relative_to(src).as_posix()
        if relative.startswith(PRINTERS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                found.append(f"{relative}:{node.lineno}")
    return found


def test_no_library_module_prints():
    """Issue 64: commands print what the library's run returns; the library speaks only through the console."""
    assert library_prints() == []


def test_the_trainer_reads_in_one_sitting():
    """`Trainer` (the loop) under 150 lines; its set-up, checkpoints and log live in their own modules."""
    tree = ast.parse((SRC / "retromae" / "training" / "loop.py").read_text(encoding="utf-8"))
    trainer = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Trainer")
    assert trainer.end_lineno - trainer.lineno + 1 < 150
