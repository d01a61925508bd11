"""Start-up of the `retromae` command: which libraries a process imports for --help and for a pre-training run.

Each check runs a fresh interpreter (a test process has long imported everything) on this checkout's sources.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retromae.cli import build_parser, discover_commands
from retromae.objectives import OBJECTIVES

SRC = Path(__file__).resolve().parents[1] / "src"
OPTIONAL = ("bm25s", "jax", "faiss", "sentence_transformers", "matplotlib", "datasets", "onnxruntime", "onnx",
            "onnxscript", "openvino")


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


@pytest.mark.slow
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


def _flags(name: str) -> list[str]:
    """The long options `retromae NAME --help` shows (hidden old spellings left out)."""
    parser = build_parser([name])
    sub = next(action for action in parser._actions if action.dest == "command").choices[name]
    return [flag for action in sub._actions if action.help != "==SUPPRESS==" for flag in action.option_strings
            if flag.startswith("--")]


def _mistyped(flag: str) -> list[str]:
    """Ways a flag is mistyped: underscores for hyphens (or its last letter doubled), two letters swapped, a letter
    doubled."""
    word = flag[2:]
    wrong = [f"--{word.replace('-', '_')}" if "-" in word else f"--{word}{word[-1]}"]
    if len(word) > 3:
        wrong += [f"--{word[0]}{word[2]}{word[1]}{word[3:]}", f"--{word[:2]}{word[1]}{word[2:]}"]
    return wrong


def test_every_command_answers_a_mistyped_option_with_its_usage_and_the_nearest_option(capsys):
    """Issue 61, item 6: `--hybird`, `--top_k`, `--querry` printed the top-level usage and no suggestion. For every
    option of every command, one of three misspellings in turn: the command's own usage line, exit code 2, and "did
    you mean" naming an option of the command (the one mistyped, where it is the nearest). Parse only, in-process."""
    from retromae.cli import main

    cases = named_itself = 0
    for command in discover_commands():
        flags = _flags(command.name)
        for number, flag in enumerate(flags):
            ways = _mistyped(flag)
            for wrong in (ways[number % len(ways)],):  # one way a flag, each way in turn: the suite stays fast
                if wrong in flags or any(other.startswith(wrong) for other in flags):
                    continue  # the misspelling is an option (or an abbreviation of one) itself
                try:
                    main([command.name, wrong])
                except SystemExit as stopped:
                    assert stopped.code == 2
                err = capsys.readouterr().err.strip().splitlines()
                assert err[0].startswith(f"usage: retromae {command.name} "), (command.name, wrong, err)
                assert err[-1].startswith(f"retromae {command.name}: error: unrecognized arguments: {wrong}"), err
                assert "did you mean --" in err[-1] and err[-1].split("did you mean ")[1][:-2] in flags, err
                cases += 1
                named_itself += f"did you mean {flag}?" in err[-1]
    assert cases > 400 and named_itself / cases > 0.9, (cases, named_itself)
    for command, wrong, meant in (("evaluate", "--hybird", "--hybrid"), ("search", "--top_k", "--top-k"),
                                  ("search", "--querry", "--query")):
        try:
            main([command, wrong])
        except SystemExit:
            pass
        assert f"did you mean {meant}?" in capsys.readouterr().err


def test_version_prints_the_package_s_version_without_importing_the_library():
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "retromae", "--version"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == f"retromae {version('retromae')}"
    modules = imported_modules(help_script(["--version"]))
    assert not modules & {"torch", "transformers", "accelerate", "numpy", *OPTIONAL}
