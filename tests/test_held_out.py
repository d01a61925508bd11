"""What a command holds out is never what it trains on (issue 63, item 5: `adapt --validation D --validation-fraction
0.5 --train D --train-split test` fine-tuned on the queries it then reported as never seen).

Generated from the CLI's registry: every command whose config declares a held-out set (`HELD_OUT`, checked by
`retromae.data.held_out.check_held_out`) is given a held-out set that shares queries with its training set, by id
in one folder and by text from a copy under other ids, on the command line, in a config file and through the Python
API; each is refused in one line naming both files before anything is written. Every option that names a validation
or probe set is declared or named here as holding out no queries it trains on."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import tiny_beir

import retromae
from retromae.cli import build_parser, discover_commands, main
from retromae.data.held_out import HeldOut, check_held_out, trained_on
from retromae.runtime.errors import DataError
from retromae.runtime.options import reading_options

HELD_OUT_WORDS = ("validation", "probe")  # what an option naming a held-out set is called
# Options naming a held-out set whose command trains on no queries: nothing of theirs can be trained on.
TRAINS_ON_NO_QUERIES = {("pretrain", "probe"): "pre-training reads documents, never the probe's queries",
                        ("pretrain", "probe_sts"): "pre-training reads documents, never STS pairs"}


def config_classes() -> dict[str, type]:
    """Every command of the CLI → the config class its options build."""
    found = {}
    for info in discover_commands():
        parser = build_parser([info.name])
        sub = next(action for action in parser._actions if action.dest == "command").choices[info.name]
        found[info.name] = sub.config_class
    return found


def declarations() -> list[tuple[str, HeldOut]]:
    return [(name, held) for name, cls in config_classes().items() for held in getattr(cls, "HELD_OUT", ())]


def test_every_held_out_option_is_declared_or_holds_out_no_training_queries():
    for name, cls in config_classes().items():
        declared = {held.held_out.option for held in getattr(cls, "HELD_OUT", ())}
        for field in dataclasses.fields(cls):
            if field.name in reading_options(cls, ("path",)) and field.name.startswith(HELD_OUT_WORDS):
                assert field.name in declared or (name, field.name) in TRAINS_ON_NO_QUERIES, (
                    f"{name} --{field.name}: declare it in {cls.__name__}.HELD_OUT (data.held_out)")
    assert {name for name, _ in declarations()} == {"adapt", "quickstart"}


def leaky_folder(folder: Path) -> Path:
    """A BEIR folder whose train split judges the same queries as its test split."""
    tiny_beir(folder)
    shutil.copy(folder / "qrels" / "test.tsv", folder / "qrels" / "train.tsv")
    return folder


def renamed_copy(source: Path, folder: Path) -> Path:
    """`source` under other query ids (`x` + id): the same questions, another id space."""
    shutil.copytree(source, folder)
    rows = [json.loads(line) for line in (source / "queries.jsonl").read_text().splitlines()]
    (folder / "queries.jsonl").write_text("".join(json.dumps({**row, "_id": "x" + row["_id"]}) + "\n" for row in rows))
    for qrels in (folder / "qrels").glob("*.tsv"):
        lines = qrels.read_text().splitlines()
        qrels.write_text("\n".join([lines[0], *("x" + line for line in lines[1:])]) + "\n")
    return folder


def options_for(held: HeldOut, held_out: Path, training: Path, tmp_path: Path, model: Path) -> dict[str, object]:
    """The options of one run: the held-out and training sets (test against train where a split is an option), and
    whatever else the command requires (a model, a corpus, an output)."""
    values: dict[str, object] = {"output": str(tmp_path / "out"), "model": str(model),
                                 "corpus": [str(held_out / "corpus.jsonl")]}
    values[held.held_out.option], values[held.training.option] = str(held_out), str(training)
    if not held.held_out.fixed:
        values[held.held_out.split] = "test"
    if not held.training.fixed:
        values[held.training.split] = "train"
    return values


def flags(values: dict[str, object], known: set[str]) -> list[str]:
    args = []
    for key, value in values.items():
        if key in known:
            args += [f"--{key.replace('_', '-')}", *(value if isinstance(value, list) else [value])]
    return args


CASES = [(name, held, way) for name, held in declarations() for way in ("id", "text")]


@pytest.mark.parametrize(("command", "held", "way"), CASES, ids=[f"{n}-{h.held_out.option}-{w}" for n, h, w in CASES])
def test_a_held_out_set_that_shares_queries_with_the_training_set_is_refused(tmp_path, tiny_model_dir, capsys,
                                                                            command, held, way):
    data = leaky_folder(tmp_path / "data")
    if way == "text":
        if held.held_out.option == held.training.option:
            pytest.skip("both sets come from one option: one folder, so ids decide")
        training = renamed_copy(data, tmp_path / "copied")  # test and train share every text, under other ids
    else:
        training = data
    cls = config_classes()[command]
    known = {field.name for field in dataclasses.fields(cls)}
    values = {key: value for key, value in options_for(held, data, training, tmp_path, tiny_model_dir).items()
              if key in known}
    expected = [f"--{held.held_out.option} {data / 'qrels' / 'test.tsv'}: 12 of its 12 queries",
                f"--{held.training.option} {training / 'qrels' / 'train.tsv'} trains on"]
    assert main([command, *flags(values, known)]) == 2
    error = capsys.readouterr().err.strip()
    assert all(part in error for part in expected) and "\n" not in error and "Traceback" not in error
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(values))
    assert main([command, "--config", str(config_file)]) == 2
    error = capsys.readouterr().err
    assert all(part in error for part in expected), error
    with pytest.raises(DataError) as raised:
        getattr(retromae, command.replace("-", "_"))(**values)
    assert all(part in str(raised.value) for part in expected)
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_the_issues_case_and_disjoint_sets(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "data"
    tiny_beir(data)
    run = ["adapt", "--model", str(tiny_model_dir), "--corpus", str(data / "corpus.jsonl"), "--output",
           str(tmp_path / "out"), "--validation", str(data), "--validation-fraction", "0.5", "--train", str(data),
           "--train-split", "test"]
    assert main(run) == 2
    assert "--validation " in capsys.readouterr().err and not (tmp_path / "out").exists()
    config = retromae.AdaptConfig(model=str(tiny_model_dir), corpus=[str(data)], output=str(tmp_path / "ok"),
                                  validation=str(data), validation_split="test", train=str(data), train_split="train")
    check_held_out(config)  # 36 train and 12 test queries apart: accepted


def test_a_training_file_is_compared_by_text(tmp_path, tiny_model_dir):
    data = tmp_path / "data"
    tiny_beir(data)
    queries = {row["_id"]: row["text"] for row in map(json.loads, (data / "queries.jsonl").read_text().splitlines())}
    training = tmp_path / "train.jsonl"
    training.write_text(json.dumps({"query": "  " + queries["q40"].upper() + " ", "pos": ["a passage"]}) + "\n")
    config = retromae.AdaptConfig(model=str(tiny_model_dir), corpus=[str(data)], output=str(tmp_path / "out"),
                                  validation=str(data), train=str(training))
    with pytest.raises(DataError, match=r"1 of its 12 queries \('q40'\) are among those --train .*train.jsonl "
                                        r"trains on \(the same texts\)"):
        check_held_out(config)


def test_ids_decide_in_one_folder_and_texts_across_folders():
    held, training = {"q1": "What is X?", "q2": "Why Y"}, {"q1": "other text", "q9": "why  y"}
    assert trained_on(held, training, same_folder=True) == ["q1"]  # the folder's ids say which query is which
    assert trained_on(held, training, same_folder=False) == ["q2"]  # across sources, the question itself
