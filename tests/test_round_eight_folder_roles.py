"""Round eight: the one file of each role in a retrieval set's folder, and query ids that look alike.

- A folder holding two files that could each be the queries (`queries.jsonl` beside `queries.tsv`) or the qrels of a
  split (`qrels/test.tsv` beside `qrels.test.tsv`) read the first without a word; the corpus's two files were already
  refused. Now one rule for every role (`data.retrieval_sets._find` through `data.corpus.named_file`): two files of
  one tier refused naming both; a file naming the split is read before its `.small` subset and that before a file
  naming no split. It reaches every reader of a data folder, checked here through the loaders and every command.
- Judgments whose query id equals a queries-file id once NFC-normalised or case-folded were dropped with ids that
  look the same on screen; the warning now shows one such pair in code points, as it does for document ids.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from conftest import tiny_beir

from retromae.cli import main
from retromae.data.retrieval_sets import (
    check_retrieval_set,
    judged_queries,
    load_retrieval_set,
    queries_file,
    split_files,
)
from retromae.runtime.errors import DataError


def add_copy(folder: Path, name: str, source: str) -> None:
    """`folder/name`: the file `source` of the folder again, gzip-compressed when `name` ends in .gz, as .tsv lines
    (id, text) when `name` is a queries .tsv."""
    text = (folder / source).read_text()
    if name.removesuffix(".gz").endswith(".tsv") and source.endswith(".jsonl"):
        text = "".join(f"{i}\tanother text\n" for i in range(3))
    target = folder / name
    if name.endswith(".gz"):
        with gzip.open(target, "wt") as handle:
            handle.write(text)
    else:
        target.write_text(text)


# (the second file, the file it copies): each beside the first makes two files for one role of split test
PAIRS = {
    "queries.jsonl and queries.tsv": ("queries.tsv", "queries.jsonl"),
    "queries.jsonl and queries.jsonl.gz": ("queries.jsonl.gz", "queries.jsonl"),
    "qrels/test.tsv and qrels.test.tsv": ("qrels.test.tsv", "qrels/test.tsv"),
    "qrels/test.tsv and qrels/test.tsv.gz": ("qrels/test.tsv.gz", "qrels/test.tsv"),
    "corpus.jsonl and corpus.jsonl.gz": ("corpus.jsonl.gz", "corpus.jsonl"),
}
QUERIES_PAIRS = [pair for pair in PAIRS if pair.startswith("queries")]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A tiny BEIR folder per pair, holding both of its files."""
    made = {}
    for pair, (name, source) in PAIRS.items():
        folder = tmp_path_factory.mktemp("two") / "beir"
        tiny_beir(folder)
        add_copy(folder, name, source)
        made[pair] = folder
    return made


def refused(call, folder: Path, pair: str) -> None:
    with pytest.raises(DataError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{folder}: holds {pair}; a folder holds one "), message
    assert message.endswith("each also .gz): move away the one not meant")


READERS = {
    "load_retrieval_set": lambda folder: load_retrieval_set(folder),
    "check_retrieval_set": lambda folder: check_retrieval_set(folder, "test"),  # every command, before its work
    "split_files": lambda folder: split_files(folder, "test"),
    "judged_queries": lambda folder: judged_queries(folder, "test"),  # adapt's held-out set
}


@pytest.mark.parametrize(("pair", "reader"), [(pair, reader) for pair in PAIRS for reader in READERS
                                               if not (pair.startswith("corpus") and reader in ("split_files",
                                                                                                "judged_queries"))])
def test_every_reader_refuses_two_files_for_one_role(pair, reader, folders):
    refused(lambda: READERS[reader](folders[pair]), folders[pair], pair)


@pytest.mark.parametrize("pair", QUERIES_PAIRS)
def test_a_queries_folder_refuses_two_queries_files(pair, folders):
    refused(lambda: queries_file(folders[pair]), folders[pair], pair)


COMMANDS = {
    "bm25": "bm25 --data B --output OUT.trec",
    "evaluate --run": "evaluate --run RUN --data B --save-run OUT.trec",
    "evaluate --model": "evaluate --model M --data B --output OUT.json",
    "mine": "mine --data B --split test --negatives bm25 --output OUT.jsonl",
    "finetune": "finetune --model M --data B --split test --output OUT --max-steps 1",
    "train-reranker": "train-reranker --model M --data B --split test --output OUT --max-steps 1",
    "quickstart": "quickstart --data B --output OUT",
    "adapt --validation": "adapt --model M --pooling cls --corpus C --validation B --output OUT --max-steps 1",
    "pretrain --probe": "pretrain --model M --corpus C --probe B --output OUT --max-steps 1",
}


@pytest.mark.parametrize("pair", ["queries.jsonl and queries.tsv", "qrels/test.tsv and qrels.test.tsv"])
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_reading_a_data_folder_refuses_it_in_one_line_writing_nothing(command, pair, folders,
                                                                                    tiny_model_dir, tmp_path, capsys):
    folder = folders[pair]
    run = tmp_path / "run.trec"
    run.write_text("q36 Q0 d36 1 1.0 x\n")
    out = tmp_path / "out"
    given = {"B": folder, "M": tiny_model_dir, "C": folder / "corpus.jsonl", "RUN": run}
    words = [str(given.get(word, word)).replace("OUT", str(out)) for word in COMMANDS[command].split()]
    assert main(words) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"retromae: error: {folder}: holds {pair}; "), err
    assert not list(tmp_path.glob("out*"))


@pytest.fixture()
def beir(tmp_path) -> Path:
    folder = tmp_path / "beir"
    tiny_beir(folder)
    return folder


def test_a_file_naming_the_split_is_read_before_one_naming_none(beir):
    """qrels.tsv (no split) beside qrels/test.tsv: the split's own file is its judgments; qrels.tsv serves a split
    without one. Likewise queries.test.tsv before queries.jsonl."""
    add_copy(beir, "qrels.tsv", "qrels/train.tsv")
    add_copy(beir, "queries.test.tsv", "queries.jsonl")
    assert split_files(beir, "test") == {"queries": beir / "queries.test.tsv", "qrels": beir / "qrels/test.tsv"}
    assert split_files(beir, "dev") == {"queries": beir / "queries.jsonl", "qrels": beir / "qrels.tsv"}


def test_ms_marcos_small_dev_set_is_read_when_named_or_alone(beir):
    """MS MARCO ships qrels.dev.tsv and qrels.dev.small.tsv: --split dev reads the first, --split dev.small the
    second; the small one alone serves --split dev. Two copies of the small one are refused."""
    add_copy(beir, "qrels.dev.tsv", "qrels/test.tsv")
    add_copy(beir, "qrels.dev.small.tsv", "qrels/test.tsv")
    assert split_files(beir, "dev")["qrels"] == beir / "qrels.dev.tsv"
    assert split_files(beir, "dev.small")["qrels"] == beir / "qrels.dev.small.tsv"
    (beir / "qrels.dev.tsv").unlink()
    assert split_files(beir, "dev")["qrels"] == beir / "qrels.dev.small.tsv"
    add_copy(beir, "qrels.dev.small.tsv.gz", "qrels.dev.small.tsv")
    refused(lambda: split_files(beir, "dev"), beir, "qrels.dev.small.tsv and qrels.dev.small.tsv.gz")


@pytest.mark.parametrize(("listed", "judged", "how"), [
    ("caf\u00e9{}", "cafe\u0301{}", "NFC normalisation"),
    ("Q{}", "q{}", "case folding"),
    ("Caf\u00e9{}", "cafe\u0301{}", "NFC normalisation and case folding")])
def test_a_dropped_query_id_that_looks_like_a_listed_one_is_shown_in_code_points(beir, caplog, listed, judged, how):
    """The judgments of q36..q39 name their query otherwise than queries.jsonl: still dropped (ids are compared
    character for character), and the warning shows one such pair in code points."""
    queries, qrels = beir / "queries.jsonl", beir / "qrels/test.tsv"
    for i in range(36, 40):
        queries.write_text(queries.read_text().replace(f'"q{i}"', f'"{listed.format(i)}"'))
        qrels.write_text(qrels.read_text().replace(f"q{i}\t", f"{judged.format(i)}\t"))
    data = load_retrieval_set(beir)
    assert len(data.queries) == 8
    [message] = [record.getMessage() for record in caplog.records if "dropped them" in record.getMessage()]
    dropped, kept = judged.format(36), listed.format(36)
    assert (f"4 judgments name 4 queries missing from queries.jsonl (e.g. {dropped!r}, ") in message
    assert (f"), and 4 of them equal a query id of queries.jsonl once Unicode-normalised (NFC) or case-folded, while "
            f"ids are compared character for character: e.g. {ascii(dropped)} of the qrels is {ascii(kept)} of "
            f"queries.jsonl after {how}") in message


def test_a_dropped_query_id_like_no_listed_one_says_nothing_of_normalisation(beir, caplog):
    qrels = beir / "qrels/test.tsv"
    qrels.write_text(qrels.read_text().replace("q36\t", "ghost\t"))
    load_retrieval_set(beir)
    [message] = [record.getMessage() for record in caplog.records if "dropped them" in record.getMessage()]
    assert "missing from queries.jsonl (e.g. 'ghost')" in message and "Unicode" not in message
