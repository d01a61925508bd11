"""The module paths before the package's folders (issue 52) still import for one release: each old name is the module
that now holds its code, the same object, and importing it warns with the new name; no file stands at an old path."""

from __future__ import annotations

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
