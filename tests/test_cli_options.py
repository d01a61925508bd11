"""The CLI's option vocabulary: `--help` layout (required inputs first, each default once) and old spellings."""

from __future__ import annotations

import json
import re

import pytest

from retromae.cli import build_parser, main
from retromae.retrieval.config import BM25Config, EncodeConfig, MineConfig, SearchConfig
from retromae.runtime.options import ConfigError, build_config

COMMANDS = ("bm25", "encode", "evaluate", "finetune", "index", "init-model", "mine", "pretrain", "quickstart",
            "report", "score", "search", "train-reranker")
OLD_SPELLINGS = {"bm25": ("--k", "--method"), "search": ("--k",), "mine": ("--method",),
                 "encode": ("--input", "--kind", "--prefix", "--max-length")}


def help_of(command: str, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option, so a default cannot wrap onto the next line
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def sections(text: str) -> dict[str, list[str]]:
    """Help sections by title ("required", "options", ...), each a list of its options (flags and help joined)."""
    found: dict[str, list[str]] = {}
    title = None
    for line in text.splitlines():
        if re.match(r"^[a-zA-Z0-9 ]+:$", line):
            title = line[:-1]
            found[title] = []
        elif title is not None and line.startswith("  -"):
            found[title].append(line.strip())
        elif title is not None and line.startswith("   ") and found[title]:  # help below a long flag
            found[title][-1] += " " + line.strip()
    return found


def test_every_command_lists_required_first_and_help_last(capsys, monkeypatch):
    for command in COMMANDS:
        found = sections(help_of(command, capsys, monkeypatch))
        titles = list(found)
        assert titles[-1] == "help" and found["help"][0].startswith("-h, --help"), command
        if command != "quickstart":  # every option of the quickstart has a default
            assert titles[0] == "required", (command, titles)
            assert all("(required" in line for line in found["required"]), command


def test_each_default_printed_once_and_unset_defaults_not_at_all(capsys, monkeypatch):
    for command in COMMANDS:
        text = help_of(command, capsys, monkeypatch)
        for line in text.splitlines():
            assert line.count("default") <= 1, (command, line)
        assert "(default: None)" not in text and "(default: [])" not in text, command


def test_old_spellings_are_hidden_from_help(capsys, monkeypatch):
    for command, spellings in OLD_SPELLINGS.items():
        text = help_of(command, capsys, monkeypatch)
        for old in spellings:
            assert not re.search(rf"(^|\s|\[){old}[\s\]]", text), (command, old)


def test_pretrain_help_puts_model_and_corpus_before_the_loop_options(capsys, monkeypatch):
    text = help_of("pretrain", capsys, monkeypatch)
    found = sections(text)
    assert list(found) == ["required", "options", "training loop", "help"]
    assert [line.split()[0] for line in found["required"]] == ["--model", "--init-from", "--corpus", "--output"]
    required = " ".join(found["required"])
    assert "(required unless --init-from)" in required and "(required unless --pairs)" in required
    assert any(line.startswith("--max-steps") for line in found["training loop"])
    assert text.startswith("usage: retromae pretrain [--model MODEL] [--init-from INIT_FROM] [--corpus CORPUS] "
                           "--output OUTPUT [options]")
    assert text.count("(default: $RETROMAE_CACHE or ~/.cache/retromae)") == 1
    assert "number of optimiser steps (default: 1000)" in text


def parse(argv: list[str]):
    arguments = build_parser().parse_args(argv)
    del arguments.handler, arguments.command
    return arguments


@pytest.mark.parametrize("command, config_cls, old, new", [
    (["bm25", "--data", "d", "--output", "r"], BM25Config, ["--k", "7"], ["--top-k", "7"]),
    (["bm25", "--data", "d", "--output", "r"], BM25Config, ["--method", "atire"], ["--variant", "atire"]),
    (["search", "--index", "i", "--queries", "q", "--output", "r"], SearchConfig, ["--k", "3"], ["--top-k", "3"]),
    (["mine", "--data", "d", "--output", "o"], MineConfig, ["--method", "bm25"], ["--negatives", "bm25"]),
])
def test_renamed_options_still_work_with_one_note(command, config_cls, old, new, capsys):
    capsys.readouterr()
    through_new = build_config(config_cls, parse(command + new))
    assert capsys.readouterr().err == ""
    through_old = build_config(config_cls, parse(command + old + old))  # given twice: still one note
    assert through_old == through_new
    err = capsys.readouterr().err
    assert err.count("note:") == 1 and f"{old[0]} is now {new[0]}" in err and "next release" in err


def test_renamed_option_in_a_config_file(tmp_path, capsys):
    path = tmp_path / "bm25.yaml"
    path.write_text("data: d\noutput: r\nk: 5\nmethod: bm25l\n")
    config = build_config(BM25Config, parse(["bm25", "--config", str(path)]))
    assert (config.top_k, config.variant) == (5, "bm25l")
    err = capsys.readouterr().err
    assert "k is now top_k" in err and "method is now variant" in err


@pytest.mark.parametrize("old, corpus, queries, prefixes, lengths", [
    (["--input", "data/corpus.jsonl", "--prefix", "passage: ", "--max-length", "32"],
     "data/corpus.jsonl", None, ("passage: ", None), (32, None)),
    (["--input", "data/queries.jsonl", "--prefix", "query: ", "--max-length", "16"],
     None, "data/queries.jsonl", (None, "query: "), (None, 16)),
    (["--input", "data/queries.jsonl", "--kind", "corpus"], "data/queries.jsonl", None, (None, None), (None, None)),
])
def test_encode_old_input_kind_prefix_and_max_length(old, corpus, queries, prefixes, lengths, capsys):
    config = build_config(EncodeConfig, parse(["encode", "--model", "m", "--output", "o", *old]))
    assert (str(config.corpus) if config.corpus else None, str(config.queries) if config.queries else None) == \
        (corpus, queries)
    assert (config.passage_prefix, config.query_prefix) == prefixes
    assert (config.passage_max_length, config.query_max_length) == lengths
    err = capsys.readouterr().err
    assert "--input is replaced by --corpus FILE or --queries FILE" in err
    assert err.count("note:") == len(old) // 2


def test_encode_new_names_check_which_text_they_apply_to(capsys):
    with pytest.raises(ConfigError, match="--query-prefix: acts only with --queries"):
        build_config(EncodeConfig, parse(["encode", "--model", "m", "--output", "o", "--corpus", "c.jsonl",
                                          "--query-prefix", "query: "]))
    with pytest.raises(ConfigError, match="either --corpus or --queries"):
        build_config(EncodeConfig, parse(["encode", "--model", "m", "--output", "o"]))


def test_encode_with_old_spellings_end_to_end(tmp_path, tiny_model_dir, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": f"text number {i}"}) + "\n" for i in range(5)))
    common = ["encode", "--model", str(tiny_model_dir), "--no-progress"]
    assert main([*common, "--input", str(corpus), "--prefix", "passage: ", "--output", str(tmp_path / "old")]) == 0
    assert main([*common, "--corpus", str(corpus), "--passage-prefix", "passage: ",
                 "--output", str(tmp_path / "new")]) == 0
    old, new = (json.loads((tmp_path / name / "encode.json").read_text()) for name in ("old", "new"))
    assert old.pop("generation") != new.pop("generation")  # a random id of each writing
    assert old == new and new["prefix"] == "passage: "
