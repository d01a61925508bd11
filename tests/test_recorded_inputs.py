"""An input reached through a record is still an input (issue 63, item 1).

What a command reads through `index.json`, `encode.json` or a run's `retromae-run.json` (the model, the corpus or
queries file, the files an index or an encoding holds) is never an output, nor inside a place an output folder
replaces: `run_folder.check_apart` follows the records of every input folder (`recorded_inputs`). Generated over
every command of the CLI, every option that names an input and every record kind; then the audit's cases through
the command line; then `--overwrite` of an index keeping a user's file inside `bm25/`.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import bare_config, tiny_beir

from retromae.cli import main
from retromae.runtime.options import ConfigError, reading_options
from retromae.runtime.run_folder import RECORDS, check_apart, input_paths

sys.path.insert(0, str(Path(__file__).parent))
from test_option_domains import commands  # noqa: E402  (the registry walk of the CLI)


def snapshot(*paths: Path) -> dict[str, bytes]:
    files = [file for path in paths for file in ([path] if path.is_file() else sorted(path.rglob("*")))]
    return {str(file): file.read_bytes() for file in files if file.is_file() and not file.name.startswith(".")}




def record_of(kind: str, named: Path) -> dict:
    """A record of `kind` naming `named` where the writers put such a path."""
    if kind == "index.json":
        return {"encoder": {"model": str(named)}, "corpus": {"path": str(named), "fingerprint": "0:x"}}
    if kind == "encode.json":
        return {"model": str(named), "source": {"path": str(named), "fingerprint": "0:x"}}
    # a run's marker: its input options are those `run_identity` fingerprinted ("NAME content")
    return {"command": "pretrain", "identity": {"corpus": [str(named)], "corpus content": ["0:x"]}}


CASES = [(command.name, command.config_cls, name, kind) for command in commands()
         for name in reading_options(command.config_cls)
         for kind in RECORDS]


@pytest.mark.parametrize(("command", "config_cls", "name", "kind"), CASES,
                         ids=[f"{c}-{n}-{k}" for c, _, n, k in CASES])
def test_every_input_option_s_records_name_inputs(command, config_cls, name, kind, tmp_path):
    """Every command, every input option, every record kind: an output file at what the record names, or an output
    folder around it, is refused naming the record; a second record, one level further, is followed too."""
    folder, further, named = tmp_path / "input", tmp_path / "further", tmp_path / "model" / "model.safetensors"
    folder.mkdir()
    further.mkdir()
    named.parent.mkdir()
    named.write_bytes(b"weights")
    (folder / kind).write_text(json.dumps(record_of(kind, further)))
    (further / kind).write_text(json.dumps(record_of(kind, named)))
    is_list = isinstance(getattr(bare_config(config_cls), name), list)
    config = bare_config(config_cls, **{name: [str(folder)] if is_list else str(folder)})
    for output, shape in ((named, "file"), (named.parent, "folder"), (further, "folder")):
        with pytest.raises(ConfigError, match="overlaps .*which this command reads"):
            check_apart(output, input_paths(config), ours=("model.safetensors",), kind=shape)
    check_apart(tmp_path / "elsewhere.trec", input_paths(config), kind="file")


@pytest.fixture()
def built(tiny_model_dir, tmp_path, capsys):
    """A model folder, a BEIR folder, an encoding of its corpus and of its queries, a hybrid index."""
    model, beir = tmp_path / "model", tmp_path / "beir"
    shutil.copytree(tiny_model_dir, model)
    tiny_beir(beir)
    for kind, source, out in (("--corpus", "corpus.jsonl", "emb"), ("--queries", "queries.jsonl", "qemb")):
        assert main(["encode", "--model", str(model), kind, str(beir / source), "--output", str(tmp_path / out),
                     "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(tmp_path / "emb"), "--output", str(tmp_path / "idx"), "--hybrid"]) == 0
    run, pretraining = tmp_path / "run", tmp_path / "pretraining.txt"  # a run folder whose marker names its corpus
    shutil.copytree(model, run / "encoder")
    pretraining.write_text("the corpus a model was pre-trained on\n")
    (run / "retromae-run.json").write_text(json.dumps(record_of("retromae-run.json", pretraining)))
    capsys.readouterr()
    return {"R": run, "P": pretraining, "M": model, "B": beir, "E": tmp_path / "emb", "QE": tmp_path / "qemb",
            "I": tmp_path / "idx", "tmp": tmp_path}


def test_outputs_at_what_records_name_are_refused_through_the_cli(built, capsys):
    """The audit's case (`search --output MODEL/model.safetensors --overwrite`, MODEL the one index.json records)
    and its kind: the recorded corpus, the queries file an encoding of queries records, an index's bm25/ files."""
    model, beir, index = built["M"], built["B"], built["I"]
    queries = str(beir / "queries.jsonl")
    cases = [
        ["search", "--index", str(index), "--queries", queries, "--output", str(model / "model.safetensors")],
        ["search", "--index", str(index), "--queries", queries, "--output", str(beir / "corpus.jsonl")],
        ["search", "--index", str(index), "--queries", str(built["QE"]), "--output", queries],
        ["search", "--index", str(index), "--queries", queries, "--output", str(index / "bm25" / "params.json")],
        ["index", "--embeddings", str(built["E"]), "--output", str(model)],
        ["evaluate", "--model", str(built["R"]), "--data", str(beir), "--save-run", str(built["P"])],
    ]
    before = snapshot(model, beir, index, built["E"], built["QE"], built["R"], built["P"])
    for args in cases:
        assert main([*args, "--overwrite"]) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "overlaps" in lines[0], (args, lines)
    assert snapshot(model, beir, index, built["E"], built["QE"], built["R"], built["P"]) == before


def test_overwrite_of_an_index_keeps_a_user_s_file_in_bm25(built, capsys):
    notes = built["I"] / "bm25" / "notes.txt"
    notes.write_text("mine")
    assert main(["index", "--embeddings", str(built["E"]), "--output", str(built["I"]), "--hybrid", "--overwrite",
                 "--k1", "1.5"]) == 0
    assert notes.read_text() == "mine"
    assert "notes.txt" not in json.loads((built["I"] / "index.json").read_text())["files"].__repr__()
    assert main(["search", "--index", str(built["I"]), "--query", "cat", "--top-k", "2"]) == 0
    capsys.readouterr()
