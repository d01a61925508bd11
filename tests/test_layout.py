"""The package's layout (issue 52): the root keeps only its public face, functions stay short, the training loop
fits in one sitting, only the command layer and the console print, and importing the package installs no import
hook (issue 64: the module paths before the folders went)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# In a fresh interpreter: importing retromae (and the API, and a package) adds no import hook, an old module path does
# not import, and the entry points stay functions.
SCRIPT = """
import importlib, json, sys
before = list(sys.meta_path)
import retromae, retromae.api
same = sys.meta_path == before
import retromae.finetuning.run, retromae.adaptation.run  # transformers adds its own finder: only ours are counted
try:
    importlib.import_module("retromae.finetune.run")
    old = True
except ModuleNotFoundError:
    old = False
ours = [repr(f) for f in sys.meta_path if type(f).__module__.startswith("retromae")]
print(json.dumps({"hooks": ours, "same": same, "old path imports": old,
                  "functions": [callable(retromae.finetune), callable(retromae.adapt), callable(retromae.quickstart),
                                type(retromae.finetune).__name__]}))
"""


def test_importing_retromae_changes_nothing_outside_it():
    """Issue 64: no finder on `sys.meta_path` (the old module paths went, docs/changelog.md), so importing a
    package never turns `retromae.finetune` (the function) into a module."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"hooks": [], "same": True, "old path imports": False, "functions": [True, True, True, "function"]}


def test_no_module_touches_the_import_system():
    """No module of the package names `sys.meta_path` or `sys.path_hooks`."""
    texts = {path.name: path.read_text(encoding="utf-8") for path in (SRC / "retromae").rglob("*.py")}
    assert [name for name, text in texts.items() if "meta_path" in text or "path_hooks" in text] == []


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
