"""Round ten: a vector folder records the side it holds, and every reader of vectors takes only its own side.

`encode` records `side` (query: --queries, passage: --corpus) in encode.json. One check (`lineage.check_query_vectors`:
side, model, pooling, normalisation, width, prompts, backend) is reached by every reader of query vectors (`search
--queries`, `index --recall-queries`); `index --embeddings` takes documents only (`lineage.check_side`); `search`'s
--pooling and --normalize are given only as the index's documents were encoded (`lineage.check_query_options`), by
the command and the API alike. A folder written before sides were recorded is read as it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import error_line, tiny_beir
from test_round_nine_prompts import PROMPTS, prompted_folder

import retromae
from retromae.cli import main
from retromae.retrieval.searcher import QueryEncoding, Searcher
from retromae.runtime.lines import quoted
from retromae.runtime.options import ConfigError

# Each embeddings folder: how `encode` wrote it (its option and the file it read, and any other options).
FOLDERS = {"documents": ("--corpus", "corpus", []), "queries": ("--queries", "queries", []),
           "queries as a corpus": ("--corpus", "queries", []),
           "queries, passage prompt": ("--queries", "queries", ["--query-prefix", "passage: "])}


@pytest.fixture(scope="module")
def world(tiny_model_dir, tmp_path_factory) -> dict:
    """A prompted model, a BEIR folder, each of `FOLDERS` encoded with the model, an index of the documents, and a
    copy of each folder whose encode.json lacks its side (as written before sides were recorded)."""
    root = tmp_path_factory.mktemp("sides")
    model = prompted_folder(tiny_model_dir, root / "model", PROMPTS)
    tiny_beir(root / "beir")
    made = {"model": model, "root": root}
    for name, (option, file, extra) in FOLDERS.items():
        made[name] = root / name
        assert main(["encode", "--model", str(model), option, str(root / "beir" / f"{file}.jsonl"), "--output",
                     str(made[name]), "--no-progress", *extra]) == 0
        made[f"old {name}"] = unrecorded(made[name], root / f"old {name}")
    assert main(["index", "--embeddings", str(made["documents"]), "--output", str(root / "idx")]) == 0
    made["idx"] = root / "idx"
    return made


def unrecorded(folder: Path, copy: Path) -> Path:
    """A copy of `folder` whose encode.json records no side."""
    shutil.copytree(folder, copy)
    record = json.loads((copy / "encode.json").read_text())
    del record["side"]
    (copy / "encode.json").write_text(json.dumps(record))
    return copy


def test_encode_records_the_side_it_encoded(world):
    sides = {name: json.loads((world[name] / "encode.json").read_text())["side"] for name in FOLDERS}
    assert sides == {"documents": "passage", "queries": "query", "queries as a corpus": "passage",
                     "queries, passage prompt": "query"}
    assert json.loads((world["idx"] / "index.json").read_text())["encoder"]["side"] == "passage"


# Every reader of query vectors: its command line (FOLDER: the query vectors) and the option naming them.
READERS = {"search --queries": ("search --index idx --queries FOLDER --output OUT", "--queries"),
           "index --recall-queries": ("index --embeddings documents --recall-queries FOLDER --factory HNSW8 "
                                      "--output OUT", "--recall-queries")}


def run(line: str, world: dict, folder: Path, out: Path) -> int:
    places = {**world, "FOLDER": folder, "OUT": out}
    return main([str(places.get(word, word)) for word in line.split()])


def call(line: str, world: dict, folder: Path, out: Path) -> None:
    """The command line's call of the Python API (`retromae.index(embeddings=..., ...)`)."""
    places = {**world, "FOLDER": folder, "OUT": out}
    command, *words = line.split()
    getattr(retromae, command)(**{flag[2:].replace("-", "_"): places.get(value, value)
                                  for flag, value in zip(words[::2], words[1::2], strict=True)})


def side_line(flag: str, folder: Path, held: str, wanted: str) -> str:
    texts = {"query": ("queries", "--queries"), "passage": ("documents", "--corpus")}
    return (f"retromae: error: {flag}: {folder} holds the vectors of {texts[held][0]} ({folder / 'encode.json'} "
            f"records side '{held}': `retromae encode {texts[held][1]}`), not of {texts[wanted][0]}; encode the "
            f"{texts[wanted][0]} with `retromae encode {texts[wanted][1]}`")


@pytest.mark.parametrize("folder", ["documents", "queries as a corpus"])
@pytest.mark.parametrize("reader", READERS)
def test_every_reader_of_query_vectors_refuses_the_documents_side(reader, folder, world, tmp_path, capsys):
    """The documents themselves (recall would find each one itself) and queries encoded as a corpus (with the
    passage prompt) are refused in one line naming the option, the folder and its record; nothing is written."""
    line, flag = READERS[reader]
    assert run(line, world, world[folder], tmp_path / "out") == 2
    assert error_line(capsys) == side_line(flag, world[folder], "passage", "query")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("reader", [*READERS, "index --embeddings"])
def test_the_python_api_refuses_the_other_side_alike(reader, world, tmp_path):
    """`retromae.search` and `retromae.index` run the same checks: the same line, as a ConfigError."""
    line, flag = READERS.get(reader, ("index --embeddings FOLDER --output OUT", "--embeddings"))
    folder, sides = (world["queries"], ("query", "passage")) if flag == "--embeddings" else (world["documents"], (
        "passage", "query"))
    with pytest.raises(ConfigError) as refusal:
        call(line, world, folder, tmp_path / "out")
    assert f"retromae: error: {refusal.value}" == side_line(flag, folder, *sides)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_of_query_vectors_refuses_one_side_prompted(reader, world, tmp_path, capsys):
    """Queries encoded with the passage prompt against documents with it: refused by every reader, not by search
    alone."""
    line, flag = READERS[reader]
    folder = world["queries, passage prompt"]
    assert run(line, world, folder, tmp_path / "out") == 2
    said = error_line(capsys)
    assert said.startswith(f"retromae: error: {flag}: {folder} was encoded with the prefix 'passage: '") and \
        "one side has the model's prompt and the other not" in said, said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_of_query_vectors_refuses_another_pooling(reader, world, tmp_path, capsys):
    """The same record check (`check_alike`) on both readers: a pooling unlike the documents'."""
    line, flag = READERS[reader]
    folder = tmp_path / "cls"
    shutil.copytree(world["queries"], folder)
    record = json.loads((folder / "encode.json").read_text())
    (folder / "encode.json").write_text(json.dumps({**record, "pooling": "cls"}))
    assert run(line, world, folder, tmp_path / "out") == 2
    assert f"retromae: error: {flag}: {folder} was encoded otherwise than the documents of" in error_line(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("folder", ["queries", "old queries"])
@pytest.mark.parametrize("reader", READERS)
def test_every_reader_of_query_vectors_takes_queries(reader, folder, world, tmp_path):
    """Queries, with their side recorded or from before sides were."""
    assert run(READERS[reader][0], world, world[folder], tmp_path / "out") == 0
    assert (tmp_path / "out").exists()


def test_an_old_folder_of_prompted_documents_is_refused_as_queries_by_its_prefix(world, tmp_path, capsys):
    """A folder without its side is read as before; its prefix, the model's passage prompt, still tells it apart."""
    folder = world["old queries as a corpus"]
    assert run(READERS["search --queries"][0], world, folder, tmp_path / "out") == 2
    assert "one side has the model's prompt and the other not" in error_line(capsys)


@pytest.mark.parametrize("folder", ["queries", "queries, passage prompt"])
def test_index_refuses_query_vectors_as_its_documents(folder, world, tmp_path, capsys):
    """`index --embeddings` takes documents: query vectors are refused before the output is claimed."""
    assert main(["index", "--embeddings", str(world[folder]), "--output", str(tmp_path / "out")]) == 2
    assert error_line(capsys) == side_line("--embeddings", world[folder], "query", "passage")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("folder", ["documents", "queries as a corpus", "old queries"])
def test_index_takes_documents_and_old_folders(folder, world, tmp_path):
    assert main(["index", "--embeddings", str(world[folder]), "--output", str(tmp_path / "out")]) == 0


def test_a_side_not_of_the_two_is_refused_naming_the_field(world, tmp_path, capsys):
    folder = tmp_path / "odd"
    shutil.copytree(world["queries"], folder)
    record = json.loads((folder / "encode.json").read_text())
    (folder / "encode.json").write_text(json.dumps({**record, "side": "both"}))
    assert main(["index", "--embeddings", str(folder), "--output", str(tmp_path / "out")]) == 2
    assert error_line(capsys) == (f"retromae: error: {folder / 'encode.json'}: field 'side' is 'both', not one of "
                                  "query, passage")


def searched(world: dict, how: str, options: dict) -> int:
    """Search the index for one text with the query-side `options`, by the command (its exit code) or by `Searcher`
    (0, or its ConfigError)."""
    if how == "retromae.Searcher":
        Searcher.load(world["idx"], encoding=QueryEncoding(**options)).search("a cat", k=3)
        return 0
    flags = [word for key, value in options.items()
             for word in ([f"--{key}", value] if key == "pooling" else [f"--{'' if value else 'no-'}normalize"])]
    return main(["search", "--index", str(world["idx"]), "--query", "a cat", "--top-k", "3", *flags])


@pytest.mark.parametrize("how", ["search --query", "retromae.Searcher"])
@pytest.mark.parametrize("key", ["pooling", "normalize"])
def test_an_option_that_changes_the_query_vectors_must_be_the_documents(key, how, world, capsys):
    """--pooling and --normalize given as index.json records act (they are its values); given otherwise, refused in
    one line naming the option and both values."""
    recorded = json.loads((world["idx"] / "index.json").read_text())["encoder"][key]
    other = {"pooling": {"mean": "cls", "cls": "mean"}.get(recorded), "normalize": not recorded}[key]
    assert searched(world, how, {key: recorded}) == 0
    capsys.readouterr()
    flag = f"--{key}" if key == "pooling" or other else "--no-normalize"
    expected = (f"{flag}: the queries would be encoded otherwise than the documents of {world['idx']} ({key} "
                f"{quoted(other)} against {quoted(recorded)}); drop {flag} to encode them as "
                f"{world['idx'] / 'index.json'} records")
    if how == "retromae.Searcher":
        with pytest.raises(ConfigError) as refusal:
            searched(world, how, {key: other})
        assert str(refusal.value) == expected
    else:
        assert searched(world, how, {key: other}) == 2
        assert error_line(capsys) == f"retromae: error: {expected}"


def test_a_finished_folder_of_the_other_side_is_encoded_again_under_its_own(world, tmp_path):
    """The same texts, prefix and length as the other side: encoded again, recording the side asked for; a folder
    from before sides were recorded is finished as it was."""
    out, queries = tmp_path / "emb", str(world["root"] / "beir" / "queries.jsonl")
    base = ["encode", "--model", str(world["model"]), "--output", str(out), "--no-progress"]
    assert main([*base, "--queries", queries, "--query-prefix", ""]) == 0
    assert main([*base, "--corpus", queries, "--passage-prefix", ""]) == 0
    assert json.loads((out / "encode.json").read_text())["side"] == "passage"
    unrecorded(out, tmp_path / "old")
    assert main([*base[:-2], str(tmp_path / "old"), "--no-progress", "--queries", queries, "--query-prefix", ""]) == 0
    assert "side" not in json.loads((tmp_path / "old" / "encode.json").read_text())
