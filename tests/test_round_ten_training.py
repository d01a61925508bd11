"""Round ten: what a training file's passage is (`data.training_groups`).

A passage is identified by its id where the file gives `pos_ids` / `neg_ids` (then on every line), else by its text
(`passage_keys`); a passage both a positive and a negative of one query is refused, one listed twice with two
teacher scores too, an id naming two texts, and a file whose every passage is one word holding a digit (document ids
given as texts); all in `read_training_records` (`_FilePassages`), the reader of finetune, train-reranker, score,
mine and adapt --train. `mine` writes the file's own ids, never row numbers; teacher scores stay with their passages.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import error_line, make_sentences

from retromae.adaptation.config import AdaptConfig
from retromae.cli import main
from retromae.data.training_groups import example_record, load_training_file, read_training_records
from retromae.preflight import check_inputs
from retromae.runtime.errors import DataError

COMMANDS = {
    "finetune": "finetune --model M --data T --output OUT --max-steps 1",
    "train-reranker": "train-reranker --model M --data T --output OUT --max-steps 1",
    "score": "score --model M --data T --output OUT.jsonl",
    "mine": "mine --data T --negatives bm25 --output OUT.jsonl",
    "adapt --train": "adapt --model M --corpus C --train T --output OUT --max-steps 1",
}
A, B = "the cat sat on the mat", "a dog ran in the park"
# a training file's lines → what its one-line refusal says after `FILE:LINE: `
BAD = {
    "a positive among the negatives": (
        [{"query": "q", "pos": [A], "neg": [B, A]}],
        "1: the passage 'the cat sat on the mat' is both in 'pos' and in 'neg': a passage is a positive or a negative"
        " of its query, never both; remove it from one of them"),
    "a positive among the negatives, by id": (
        [{"query": "q", "pos": [A], "pos_ids": ["d1"], "neg": [B, A], "neg_ids": ["d2", "d1"]}],
        "1: the passage 'd1' ('the cat sat on the mat') is both in 'pos' and in 'neg'"),
    "a negative twice with two scores": (
        [{"query": "q", "pos": [A], "neg": [B, B], "pos_scores": [9.0], "neg_scores": [1.0, 3.0]}],
        "1: the passage 'a dog ran in the park' is listed twice in 'neg' with two teacher scores, 1.0 and 3.0; "
        "list it once"),
    "document ids as passages": (
        [{"query": "q", "pos": ["31715818"], "neg": ["4983", "doc-12"]}, {"query": "r", "pos": ["7912"]}],
        "1: '31715818', as every passage of its 2 lines, is one word holding a digit, as a document id is: 'pos' and "
        "'neg' hold the passages' texts (trained on as they are); give the texts (their ids in 'pos_ids' / "
        "'neg_ids'), or a BEIR / MS MARCO folder and --split"),
    "an id naming two texts": (
        [{"query": "q", "pos": [A], "pos_ids": ["d1"]}, {"query": "r", "pos": [B], "pos_ids": ["d1"]}],
        "2: the passage id 'd1' names another text ('a dog ran in the park') than at line 1 ('the cat sat on the "
        "mat'); an id names one passage"),
    "ids on one line only": (
        [{"query": "q", "pos": [A], "pos_ids": ["d1"]}, {"query": "r", "pos": [B]}],
        "2: gives no 'pos_ids'/'neg_ids', where line 1 does; a file's passages are identified by their ids on every "
        "line, or by their text on every line"),
    "ids for the positives only": (
        [{"query": "q", "pos": [A], "pos_ids": ["d1"], "neg": [B]}],
        "1: gives no 'neg_ids' for its 'neg' passages; a line that gives passage ids gives them for every passage"),
}


def write_lines(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def world(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("training")
    shutil.copytree(tiny_model_dir, root / "model")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in make_sentences(40)), encoding="utf-8")
    return {"root": root, "M": root / "model", "C": corpus}


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("command", COMMANDS)
def test_every_reader_of_a_training_file_refuses_its_passages_in_one_line(world, command, case, tmp_path, capsys):
    records, message = BAD[case]
    train = write_lines(tmp_path / "train.jsonl", records)
    words = COMMANDS[command].split()
    output = tmp_path / f"out{next(word for word in words if word.startswith('OUT'))[3:]}"
    args = [str(train) if word == "T" else str(output) if word.startswith("OUT") else str(world.get(word, word))
            for word in words]
    assert main(args) == 2
    assert error_line(capsys).startswith(f"retromae: error: {train}:{message}")
    assert not output.exists()


@pytest.mark.parametrize("case", BAD)
def test_the_reader_and_the_loader_refuse_alike(case, tmp_path):
    records, message = BAD[case]
    train = write_lines(tmp_path / "train.jsonl", records)
    for read in (load_training_file, lambda path: list(read_training_records(path))):
        with pytest.raises(DataError) as refused:
            read(train)
        assert str(refused.value).startswith(f"{train}:{message}")


def test_a_passage_listed_twice_with_one_score_counts_once_and_keeps_its_score(tmp_path):
    train = write_lines(tmp_path / "train.jsonl", [
        {"query": "q", "pos": [A, A], "neg": [B, "c text here", B], "pos_scores": [9.0, 9.0],
         "neg_scores": [1.0, -2.0, 1.0]},
        {"query": "r", "pos": ["c text here"], "neg": [A], "pos_scores": [5.0], "neg_scores": [0.5]}])
    data = load_training_file(train)
    first, second = (example_record(data, example) for example in data.examples)
    assert first == {"query": "q", "pos": [A], "neg": [B, "c text here"], "pos_scores": [9.0],
                     "neg_scores": [1.0, -2.0]}
    assert second == {"query": "r", "pos": ["c text here"], "neg": [A], "pos_scores": [5.0], "neg_scores": [0.5]}


def test_ids_identify_passages_and_equal_texts_under_two_ids_are_two(tmp_path):
    train = write_lines(tmp_path / "train.jsonl", [
        {"query_id": "q1", "query": "q", "pos": [A], "pos_ids": ["d1"], "neg": [A, B], "neg_ids": ["d9", "d2"]},
        {"query_id": "q2", "query": "r", "pos": [B], "pos_ids": ["d2"], "neg": [], "neg_ids": []}])
    data = load_training_file(train)
    assert (data.ids, data.texts, data.ids_given) == (["d1", "d9", "d2"], [A, A, B], True)
    assert example_record(data, data.examples[0]) == {"query_id": "q1", "query": "q", "pos": [A], "neg": [A, B],
                                                      "pos_ids": ["d1"], "neg_ids": ["d9", "d2"]}


def _mined(world: dict, train: Path, output: Path) -> list[dict]:
    assert main(["mine", "--data", str(train), "--negatives", "bm25", "--output", str(output), "--rank-end", "10",
                 "--negatives-per-query", "3"]) == 0
    return [json.loads(line) for line in output.read_text().splitlines()]


def test_mine_writes_the_file_s_own_ids(world, tmp_path):
    texts = make_sentences(12, seed=5)
    records = [{"query_id": f"q{i}", "query": " ".join(texts[i].split()[:3]), "pos": [texts[i]],
                "pos_ids": [f"doc-{1000 + i}"], "neg": [texts[i + 6]], "neg_ids": [f"doc-{1006 + i}"]}
               for i in range(6)]
    mined = _mined(world, write_lines(tmp_path / "train.jsonl", records), tmp_path / "mined.jsonl")
    given = {f"doc-{1000 + i}": text for i, text in enumerate(texts)}
    assert [r["query_id"] for r in mined] == [r["query_id"] for r in records]
    assert [r["pos_ids"] for r in mined] == [r["pos_ids"] for r in records] and any(r["neg"] for r in mined)
    for record in mined:
        for ids, side in (("pos_ids", "pos"), ("neg_ids", "neg")):
            assert [given[doc_id] for doc_id in record[ids]] == record[side]


def test_mine_writes_no_ids_for_a_file_without_them(world, tmp_path):
    texts = make_sentences(12, seed=6)
    records = [{"query_id": f"q{i}", "query": " ".join(texts[i].split()[:3]), "pos": [texts[i]]} for i in range(12)]
    mined = _mined(world, write_lines(tmp_path / "train.jsonl", records), tmp_path / "mined.jsonl")
    assert all(set(record) == {"query_id", "query", "pos", "neg"} for record in mined)
    assert [record["query_id"] for record in mined] == [f"q{i}" for i in range(12)]


def test_one_word_passages_without_digits_and_a_file_with_some_texts_are_read(tmp_path):
    words = write_lines(tmp_path / "words.jsonl", [{"query": "capital of france", "pos": ["Paris"], "neg": ["Lyon"]}])
    mixed = write_lines(tmp_path / "mixed.jsonl", [{"query": "q", "pos": ["31715818"], "neg": ["4983"]},
                                                   {"query": "r", "pos": ["covid-19 spreads by air"]}])
    assert [len(load_training_file(path).texts) for path in (words, mixed)] == [2, 3]


def test_adapt_reads_a_training_file_as_its_help_says(world, tmp_path):
    train = write_lines(tmp_path / "train.jsonl", [{"query": "q", "pos": [A], "neg": [B]}])
    config = AdaptConfig(model=str(world["M"]), corpus=[str(world["C"])], output=str(tmp_path / "out"),
                         train=str(train))
    check_inputs(config)  # was: "train.jsonl: not a folder (a file)", the head read as a BEIR folder's
