"""Start-up of the `retromae` command: which libraries a process imports for --help and for a pre-training run.

Each check runs a fresh interpreter (a test process has long imported everything) on this checkout's sources.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from retromae.cli import build_parser, discover_commands
from retromae.objectives import OBJECTIVES

SRC = Path(__file__).resolve().parents[1] / "src"
OPTIONAL = ("bm25s", "jax", "faiss", "sentence_transformers", "matplotlib", "datasets")


def imported_modules(script: str) -> set[str]:
    """The top-level modules a fresh interpreter has imported once `script` has run (it must print nothing)."""
    probe = script + "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def help_script(argv: list[str]) -> str:
    return ("import contextlib, io\nfrom retromae.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n    main({argv!r})")


def test_top_level_help_imports_no_command_and_no_heavy_library():
    modules = imported_modules(help_script(["--help"]))
    assert not modules & {"torch", "transformers", "accelerate", "numpy", *OPTIONAL}


def test_pretrain_help_imports_neither_torch_nor_an_optional_library():
    modules = imported_modules(help_script(["pretrain", "--help"]))
    assert not modules & {"torch", "transformers", "accelerate", *OPTIONAL}


def test_no_command_help_imports_torch():
    """Every `retromae COMMAND --help`, each in its own parse, in one fresh interpreter: the options are declared in
    modules that import neither torch nor transformers nor accelerate (nor an optional library)."""
    names = [command.name for command in discover_commands()]
    script = "".join(help_script([name, "--help"]) + "\n" for name in names)
    modules = imported_modules(script)
    assert len(names) >= 13
    assert not modules & {"torch", "transformers", "accelerate", *OPTIONAL}, modules & {"torch", *OPTIONAL}


def test_pretraining_run_imports_no_optional_library(tiny_model_dir, tiny_corpus, tmp_path):
    """Up to the end of training nothing optional is loaded; exporting the sentence-transformers folder then needs
    sentence-transformers (and what it imports), but never BM25, jax, faiss or matplotlib."""
    argv = ["pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus), "--output", str(tmp_path / "run"),
            "--max-steps", "2", "--batch-size", "4", "--max-length", "32", "--save-every", "0",
            "--cache-dir", str(tmp_path / "cache")]
    script = f"""
import contextlib, io, sys
import retromae.training.loop
from retromae.cli import main
run, loaded = retromae.training.loop.Trainer.run, set()
def spy(self):
    loaded.update(m.split('.')[0] for m in sys.modules)
    run(self)
retromae.training.loop.Trainer.run = spy
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    assert main({argv!r}) == 0
assert loaded and not loaded & set({OPTIONAL!r}), loaded & set({OPTIONAL!r})
"""
    modules = imported_modules(script)
    assert not modules & {"bm25s", "jax", "faiss", "matplotlib"}


def test_commands_are_listed_without_importing_them():
    names = [command.name for command in discover_commands()]
    assert {"pretrain", "finetune", "train-reranker", "bm25", "evaluate"} <= set(names)
    assert all(command.help for command in discover_commands())


def test_parser_without_argv_knows_every_command_option():
    parser = build_parser()
    args = parser.parse_args(["pretrain", "--model", "m", "--corpus", "c", "--output", "o", "--compile"])
    assert args.compile is True and args.handler.__module__ == "retromae.commands.pretrain"


def test_every_objective_of_the_table_loads_with_the_table_s_options():
    for name in OBJECTIVES:  # `ObjectiveEntry.load` refuses a class whose options are not the table's
        assert OBJECTIVES[name].options is OBJECTIVES.entry(name).options and OBJECTIVES[name].title
