"""Round nine: the named prompts of a sentence-transformers folder are put by default.

A folder whose config_sentence_transformers.json names a query and a document prompt (E5-, BGE-, Nomic-style) was
encoded without them unless --query-prefix / --passage-prefix gave them, while sentence-transformers'
`encode_query` / `encode_document` (and mteb) put them. Both options now default to "not given", resolved where
texts are encoded (`models.encoder.side_prefix`): the text given ('' for none), else the folder's prompt for the
side, said once per model and side. The prefix put is what encode.json and index.json record, and a search whose
queries would get the query prompt by default is refused where the documents were encoded without the passage
prompt (`retrieval.lineage.check_prompts`): an index encoded before this round, or with --passage-prefix ''.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import error_line, tiny_beir

from retromae import Searcher
from retromae.adaptation import guard
from retromae.cli import main, parse
from retromae.data.retrieval_sets import load_corpus, load_queries
from retromae.evaluation.config import EvaluateConfig
from retromae.models import encoder as encoder_module
from retromae.models.encoder import Encoder
from retromae.models.export import export_encoder, export_sentence_transformer
from retromae.models.masked_lm import load_masked_lm
from retromae.retrieval import search as search_module
from retromae.retrieval.config import EncodeConfig, SearchConfig
from retromae.retrieval.encode import load_embeddings
from retromae.retrieval.searcher import QueryEncoding
from retromae.runtime.options import ConfigError, build_config

ST_FILE = "config_sentence_transformers.json"
PROMPTS = {"query": "query: ", "document": "passage: "}


def prompted_folder(tiny_model_dir: Path, folder: Path, prompts: dict[str, str]) -> Path:
    """A sentence-transformers folder (our export without retromae_encoder.json) naming `prompts`."""
    model, tokenizer = load_masked_lm(str(tiny_model_dir))
    export_encoder(model, tokenizer, folder, pooling="mean")
    (folder / "retromae_encoder.json").unlink()
    path = folder / ST_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "prompts": prompts}))
    return folder


@pytest.fixture(scope="module")
def world(tiny_model_dir, tmp_path_factory) -> dict:
    """The prompted folder, a BEIR folder, an index of its corpus encoded with the defaults, and sentence-transformers'
    vectors of every text: by id, as `encode_query`/`encode_document` and as `encode` give them."""
    from sentence_transformers import SentenceTransformer

    root = tmp_path_factory.mktemp("prompts")
    model = prompted_folder(tiny_model_dir, root / "model", PROMPTS)
    tiny_beir(root / "beir")
    corpus = {doc_id: passage.joined() for doc_id, passage in load_corpus(root / "beir" / "corpus.jsonl").items()}
    queries = load_queries(root / "beir" / "queries.jsonl")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encoder_module, "_PROMPTS_NOTED", set())
        assert main(["encode", "--model", str(model), "--corpus", str(root / "beir" / "corpus.jsonl"), "--output",
                     str(root / "emb"), "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(root / "emb"), "--output", str(root / "idx")]) == 0
    st = SentenceTransformer(str(model), device="cpu")

    def by_id(texts: dict[str, str], vectors: np.ndarray) -> dict[str, np.ndarray]:
        return dict(zip(texts, vectors, strict=True))

    prompted = {"passage": st.encode_document(list(corpus.values())), "query": st.encode_query(list(queries.values()))}
    plain = {"passage": st.encode(list(corpus.values())), "query": st.encode(list(queries.values()))}
    assert all(np.abs(prompted[side] - plain[side]).min(axis=1).max() > 1e-3 for side in plain)  # told apart
    texts = {"passage": corpus, "query": queries}
    return {"model": model, "beir": root / "beir", "root": root, "idx": root / "idx",
            "prompted": {side: by_id(texts[side], vectors) for side, vectors in prompted.items()},
            "plain": {side: by_id(texts[side], vectors) for side, vectors in plain.items()}}


@pytest.fixture()
def captured(monkeypatch) -> dict:
    """The vectors the dense searches get (side → id → vector), whatever encoded them; nothing said yet."""
    found: dict[str, dict[str, np.ndarray]] = {}
    monkeypatch.setattr(encoder_module, "_PROMPTS_NOTED", set())
    vector_search, run_vectors = search_module.vector_search, Searcher.run_vectors

    def record(doc_ids, doc_vectors, query_ids, query_vectors, *args, **kwargs):
        found["passage"] = dict(zip(doc_ids, doc_vectors, strict=True))
        found["query"] = dict(zip(query_ids, query_vectors, strict=True))
        return vector_search(doc_ids, doc_vectors, query_ids, query_vectors, *args, **kwargs)

    def record_queries(self, query_ids, vectors, *args, **kwargs):
        found["query"] = dict(zip(query_ids, vectors, strict=True))
        return run_vectors(self, query_ids, vectors, *args, **kwargs)

    monkeypatch.setattr(search_module, "vector_search", record)
    monkeypatch.setattr(Searcher, "run_vectors", record_queries)
    return found


def off_options(off: bool, *sides: str) -> list[str]:
    """--SIDE-prefix '' for each of `sides` where `off`, else no option."""
    return [word for side in sides for word in (f"--{side}-prefix", "")] if off else []


def encode_side(side: str):
    def run(world, tmp_path, off, found):
        flag, name = ("--queries", "queries.jsonl") if side == "query" else ("--corpus", "corpus.jsonl")
        assert main(["encode", "--model", str(world["model"]), flag, str(world["beir"] / name), "--output",
                     str(tmp_path / "out"), "--no-progress", *off_options(off, side)]) == 0
        ids, vectors, info = load_embeddings(tmp_path / "out")
        found[side] = dict(zip(ids, vectors, strict=True))
        return {side: info["prefix"]}
    return run


def evaluate(table: bool):
    def run(world, tmp_path, off, found):
        output = ["--output", str(tmp_path / "report")] if table else []
        assert main(["evaluate", "--model", str(world["model"]), "--data", str(world["beir"]),
                     *off_options(off, "query", "passage"), *output]) == 0
    return run


def search_command(world, tmp_path, off, found):
    assert main(["search", "--index", str(world["idx"]), "--queries", str(world["beir"] / "queries.jsonl"),
                 "--output", str(tmp_path / "run.trec"), *off_options(off, "query")]) == 0


def searcher_api(world, tmp_path, off, found):
    Searcher.load(world["idx"], encoding=QueryEncoding(prefix="") if off else None).run(
        load_queries(world["beir"] / "queries.jsonl"), k=3)


COMMANDS = {"encode --corpus": encode_side("passage"), "encode --queries": encode_side("query"),
            "evaluate": evaluate(table=False), "evaluate --output FOLDER": evaluate(table=True),
            "search --queries": search_command, "Searcher.run": searcher_api}


# every command with its defaults, and with the prefix '' (the table's cache aside: it encodes as `evaluate` does)
RUNS = [(command, off) for command in COMMANDS for off in (False, True) if not (off and "FOLDER" in command)]


@pytest.mark.parametrize("command, off", RUNS, ids=[f"{command}, {'prefix' if off else 'default'}"
                                                     for command, off in RUNS])
def test_the_commands_encode_as_encode_query_and_encode_document_do(command, off, world, captured, tmp_path, capsys):
    """With the default options, the vectors of every command that encodes are sentence-transformers'
    `encode_query`/`encode_document`'s; with the prefix '' given, its `encode`'s; the prefix put is recorded."""
    recorded = COMMANDS[command](world, tmp_path, off, captured)
    expected = world["plain" if off else "prompted"]
    assert captured
    for side, vectors in captured.items():
        for text_id, vector in vectors.items():
            np.testing.assert_allclose(vector, expected[side][text_id], atol=2e-5, err_msg=f"{side} {text_id}")
    if recorded is not None:
        assert recorded == {side: "" if off else PROMPTS["query" if side == "query" else "document"]
                            for side in recorded}
    notes = [line for line in capsys.readouterr().err.splitlines() if "prompt" in line]
    assert len(notes) == (0 if off else len(captured))


def test_the_prompt_put_is_said_once_per_model_and_side(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(encoder_module, "_PROMPTS_NOTED", set())
    for run in ("a", "b"):
        assert main(["encode", "--model", str(world["model"]), "--queries", str(world["beir"] / "queries.jsonl"),
                     "--output", str(tmp_path / run), "--no-progress"]) == 0
    assert main(["encode", "--model", str(world["model"]), "--queries", str(world["beir"] / "queries.jsonl"),
                 "--output", str(tmp_path / "c"), "--no-progress", "--query-prefix", "query: "]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "prompt" in line]
    assert notes == [f"retromae: note: {world['model']}: 'query: ' is put before every query, the query prompt its "
                     f"{ST_FILE} names (as sentence-transformers' encode_query does); --query-prefix '' puts none"]


@pytest.fixture(scope="module")
def unprompted_index(world) -> Path:
    """An index of the prompted model's corpus encoded with --passage-prefix '' (as every index was before)."""
    root = world["root"]
    assert main(["encode", "--model", str(world["model"]), "--corpus", str(world["beir"] / "corpus.jsonl"),
                 "--output", str(root / "plain emb"), "--no-progress", "--passage-prefix", ""]) == 0
    assert main(["index", "--embeddings", str(root / "plain emb"), "--output", str(root / "plain idx")]) == 0
    return root / "plain idx"


SEARCHES = {"search --query": lambda index, extra: main(["search", "--index", str(index), "--query", "a cat",
                                                         *extra]),
            "Searcher.search": lambda index, extra: Searcher.load(index, **extra).search("a cat")}


@pytest.mark.parametrize("path", list(SEARCHES))
def test_a_query_prompt_by_default_is_refused_on_documents_encoded_without_the_passage_prompt(path, unprompted_index,
                                                                                              world, capsys):
    """The queries would get 'query: ' and the documents got no 'passage: ': refused, naming --query-prefix and
    the record; --query-prefix '' searches them as they were encoded."""
    expected = (f"--query-prefix: the documents were encoded with the prefix '' ({unprompted_index / 'index.json'} "
                f"records it), and {world['model']} puts 'passage: ' before a passage and 'query: ' before a query by "
                "default: give --query-prefix to say what their queries need ('' for none), or encode the documents "
                "again with the model's passage prompt")
    if path == "search --query":
        assert SEARCHES[path](unprompted_index, []) == 2
        assert error_line(capsys) == f"retromae: error: {expected}"
        assert main(["search", "--index", str(unprompted_index), "--query", "a cat", "--query-prefix", ""]) == 0
    else:
        with pytest.raises(ConfigError) as raised:
            SEARCHES[path](unprompted_index, {})
        assert str(raised.value) == expected
        assert SEARCHES[path](unprompted_index, {"encoding": QueryEncoding(prefix="")})


def test_a_model_naming_a_query_prompt_alone_searches_documents_encoded_without_a_prefix(tiny_model_dir, world,
                                                                                         tmp_path):
    """BGE-style: a query prompt and no document prompt; the documents are encoded with none, as the folder says."""
    model = prompted_folder(tiny_model_dir, tmp_path / "model", {"query": "Represent this sentence: "})
    assert main(["encode", "--model", str(model), "--corpus", str(world["beir"] / "corpus.jsonl"), "--output",
                 str(tmp_path / "emb"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "emb" / "encode.json").read_text())["prefix"] == ""
    assert main(["index", "--embeddings", str(tmp_path / "emb"), "--output", str(tmp_path / "idx")]) == 0
    assert Searcher.load(tmp_path / "idx").search("a cat")


def test_adapt_scores_the_base_and_a_candidate_with_the_run_s_prefixes(world, monkeypatch):
    """The guard scores as `evaluate` scores what a user keeps: the base and an adapted candidate alike with the run's
    prefixes, which the export names (round ten: `tests/test_round_ten_adapt.py`)."""
    prefixes = []

    def dense_search(encoder, corpus, queries, *, passages, questions, **options):
        prefixes.append((passages.prefix, questions.prefix))
        return {query_id: {} for query_id in queries}

    monkeypatch.setattr(guard, "dense_search", dense_search)
    monkeypatch.setattr(guard, "metric_of", lambda validation, run: (0.0, {}))
    encoder = Encoder.load(world["model"], device="cpu")
    validation = type("Validation", (), {"corpus_texts": lambda self: {}, "queries": {"q": "x"}, "corpus": {},
                                         "qrels": {}})()
    sides = {"query": "query: ", "passage": "passage: "}
    for step in (0, 1):
        guard.score_candidate(guard.Candidate(step, 1.0), encoder, validation, 8, sides)
    assert prefixes == [("passage: ", "query: ")] * 2


@pytest.mark.parametrize("argv", [["evaluate", "--run", "RUN", "--data", "B", "--query-prefix", ""],
                                  ["encode", "--model", "m", "--corpus", "c", "--output", "o", "--query-prefix", ""],
                                  ["search", "--index", "i", "--queries", "EMB", "--output", "o",
                                   "--query-prefix", ""]])
def test_an_empty_prefix_given_where_nothing_is_encoded_is_refused(argv, tmp_path):
    """'' is now a choice (no prompt), so, like any prefix, it is refused where it would change nothing."""
    (tmp_path / "EMB").mkdir()
    argv = [str(tmp_path / "EMB") if value == "EMB" else value for value in argv]
    config_cls = {"evaluate": EvaluateConfig, "encode": EncodeConfig, "search": SearchConfig}[argv[0]]
    with pytest.raises(ConfigError, match="^--query-prefix: acts only "):
        build_config(config_cls, parse(argv))


def test_an_export_names_the_prompts_it_is_given_for_retromae_and_sentence_transformers(world, tmp_path):
    """`adapt` keeping its base exports it with the prompts the guard scored it with (`export_encoder(prompts=)`):
    retromae reads them back by side, sentence-transformers by name, and the sentence-transformers copy keeps them."""
    from sentence_transformers import SentenceTransformer

    encoder = Encoder.load(world["model"], device="cpu")
    export_encoder(encoder.model, encoder.tokenizer, tmp_path / "encoder", pooling="mean", prompts=encoder.prompts)
    export_sentence_transformer(tmp_path / "encoder", tmp_path / "st")
    sides = {"query": "query: ", "passage": "passage: "}
    assert encoder.prompts == sides
    for folder in ("encoder", "st"):
        assert Encoder.load(tmp_path / folder, device="cpu").prompts == sides
        assert SentenceTransformer(str(tmp_path / folder), device="cpu").prompts == PROMPTS
    export_encoder(encoder.model, encoder.tokenizer, tmp_path / "candidate", pooling="mean")
    assert Encoder.load(tmp_path / "candidate", device="cpu").prompts == {}
