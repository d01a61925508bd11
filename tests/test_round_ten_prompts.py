"""Round ten: every path that encodes with a model puts the prefixes `side_prefix` resolves.

Round nine put a sentence-transformers folder's named prompts in `encode`, `evaluate` and `search`. Here: `mine` and
fine-tuning (its mining, its training batches, its export) put them too, with --query-prefix / --passage-prefix;
pre-encoded queries are checked against the documents' prefix (`lineage.check_vector_prompts`); STS evaluation
refuses the side options; a table's run identity records the prefix put; and a folder whose query_length,
document_length or query_expansion would change `encode_query`/`encode_document`'s vectors is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import error_line, make_sentences, tiny_beir
from test_round_nine_prompts import PROMPTS, prompted_folder

from retromae.cli import main
from retromae.evaluation.config import EvaluateConfig
from retromae.evaluation.run import prefixes_put
from retromae.finetuning.batches import GroupCollator
from retromae.models import encoder as encoder_module
from retromae.models.encoder import Encoder, Towers
from retromae.retrieval import mining

SIDES = {"query": "query: ", "passage": "passage: "}


@pytest.fixture(scope="module")
def world(tiny_model_dir, tmp_path_factory) -> dict:
    """A prompted sentence-transformers folder, a BEIR folder, and sentence-transformers' vectors of its texts (as
    `encode_query`/`encode_document` and as `encode` give them)."""
    from sentence_transformers import SentenceTransformer

    root = tmp_path_factory.mktemp("prompts10")
    model = prompted_folder(tiny_model_dir, root / "model", PROMPTS)
    tiny_beir(root / "beir")
    st = SentenceTransformer(str(model), device="cpu")
    return {"model": model, "beir": root / "beir", "root": root, "st": st}


@pytest.fixture()
def ranked(monkeypatch) -> dict:
    """The passage and query vectors dense mining ranks with."""
    found = {}
    build_index, search = mining.build_index, mining.search
    monkeypatch.setattr(encoder_module, "_PROMPTS_NOTED", set())

    def index(vectors, *args):
        found["passage"] = vectors
        return build_index(vectors, *args)

    def searched(index, queries, *args, **kwargs):
        found["query"] = queries
        return search(index, queries, *args, **kwargs)

    monkeypatch.setattr(mining, "build_index", index)
    monkeypatch.setattr(mining, "search", searched)
    return found


def mine_command(world, tmp_path, off):
    flags = [word for side in ("query", "passage") for word in (f"--{side}-prefix", "")] if off else []
    assert main(["mine", "--model", str(world["model"]), "--data", str(world["beir"]), "--output",
                 str(tmp_path / "mined.jsonl"), "--rank-end", "5", "--negatives-per-query", "2", *flags]) == 0


def finetune_miner(world, tmp_path, off):
    from retromae.data.training_groups import load_training_data
    from retromae.finetuning.negatives import Miner
    from retromae.retrieval.mining_options import MiningOptions

    encoder = Encoder.load(world["model"], device="cpu")
    prefixes = {"query": "", "passage": ""} if off else {}
    Miner(load_training_data(world["beir"], "train"), MiningOptions(rank_end=5), encoder,
          prefixes=prefixes).rankings("model", show_progress=False)


MINERS = {"mine": mine_command, "finetune's Miner": finetune_miner}
MINES = [(path, off) for path in MINERS for off in (False, True)]


@pytest.mark.parametrize("path, off", MINES, ids=[f"{p}, {'prefix' if off else 'default'}" for p, off in MINES])
def test_mining_ranks_with_the_vectors_encode_query_and_encode_document_give(path, off, world, ranked, tmp_path):
    """Dense mining ranks with `encode_document`'s passages and `encode_query`'s queries by default, with `encode`'s
    where the prefixes are given as ''."""
    from retromae.data.training_groups import load_training_data

    MINERS[path](world, tmp_path, off)
    data = load_training_data(world["beir"], "train")
    st = world["st"]
    expected = {"passage": (st.encode if off else st.encode_document)(data.texts),
                "query": (st.encode if off else st.encode_query)([example.query for example in data.examples])}
    for side, vectors in expected.items():
        np.testing.assert_allclose(ranked[side], vectors, atol=2e-5, err_msg=side)


def test_finetuning_trains_on_the_prompts_and_exports_them(world, tmp_path, monkeypatch):
    """A prompted base is fine-tuned with its prompts on both sides (as E5's recipe trains) and its export names them:
    retromae and sentence-transformers encode it as it was trained; '' trains and exports with none."""
    from sentence_transformers import SentenceTransformer

    batches = []
    call = GroupCollator.__call__
    monkeypatch.setattr(GroupCollator, "__call__", lambda self, groups: batches.append(self.prefixes) or call(
        self, groups))
    for name, flags in (("prompted", []), ("plain", ["--query-prefix", "", "--passage-prefix", ""])):
        out = tmp_path / name
        assert main(["finetune", "--model", str(world["model"]), "--data", str(world["beir"]), "--output", str(out),
                     "--max-steps", "1", "--batch-size", "4", *flags]) == 0
        put = {} if flags else SIDES
        assert batches[-1] == ({"query": "", "passage": ""} if flags else SIDES)
        assert Encoder.load(out / "encoder", device="cpu").prompts == put
        st = json.loads((out / "sentence-transformer" / "config_sentence_transformers.json").read_text())["prompts"]
        assert {key: value for key, value in st.items() if value} == (
            {} if flags else {"query": "query: ", "document": "passage: "})
        assert SentenceTransformer(str(out / "encoder"), device="cpu").prompts.get("query", "") == put.get("query", "")


def test_the_collator_puts_each_side_s_prefix(world):
    """The training batches hold the tokens of prefix + text, as `Encoder.tokenize` makes them."""
    encoder = Encoder.load(world["model"], device="cpu")
    batch = GroupCollator(encoder.tokenizer, 16, 32, SIDES)([("a cat", ["the dog barks"], None)])
    for side, text, length in (("query", "a cat", 16), ("passage", "the dog barks", 32)):
        assert batch[f"{side}_input_ids"][0].tolist() == encoder.tokenize([text], length, SIDES[side])[0]



STS_OPTIONS = [("--query-prefix", "q: "), ("--passage-prefix", ""), ("--query-max-length", "8"),
               ("--passage-max-length", "8")]


@pytest.mark.parametrize("flag, value", STS_OPTIONS, ids=[flag for flag, _ in STS_OPTIONS])
def test_sts_refuses_the_options_of_a_side(flag, value, world, tmp_path, capsys):
    """STS pairs are encoded as sentence-transformers' EmbeddingSimilarityEvaluator encodes them: no prompt, the
    model's own length; a query or passage option given is refused naming it, and nothing is written."""
    (tmp_path / "sts").mkdir()
    sentences = make_sentences(12, seed=4)
    rows = [f"main\tMSRvid\t2012\t{i:04d}\t{i % 6}.0\t{text}\t{' '.join(text.split()[:3])}"
            for i, text in enumerate(sentences)]
    (tmp_path / "sts" / "sts-test.csv").write_text("\n".join(rows) + "\n")
    assert main(["evaluate", "--model", str(world["model"]), "--data", str(tmp_path / "sts"), "--output",
                 str(tmp_path / "r.json"), flag, value]) == 2
    assert error_line(capsys) == (
        f"retromae: error: {flag}: does not act on STS pairs: their sentences are neither queries nor passages, and "
        "each is encoded as it is, at the model's own length and with no prompt (as sentence-transformers' "
        "EmbeddingSimilarityEvaluator encodes them); drop it")
    assert not (tmp_path / "r.json").exists()
    assert main(["evaluate", "--model", str(world["model"]), "--data", str(tmp_path / "sts")]) == 0


@pytest.mark.parametrize("given, prompted, expected", [
    ({}, True, {"query_prefix": "query: ", "passage_prefix": "passage: "}),
    ({"query_prefix": ""}, True, {"passage_prefix": "passage: "}),
    ({}, False, {}),
], ids=["prompted, default", "prompted, --query-prefix ''", "no prompts"])
def test_a_table_s_run_identity_records_the_prefix_put(given, prompted, expected, world, tiny_model_dir):
    """The prefix options of a table's identity are those put: a prompted model's prompts where not given; a model
    without prompts keeps the identity it had (None, as given)."""
    model = world["model"] if prompted else tiny_model_dir
    config = EvaluateConfig(model=[str(model)], data=[world["beir"]], **given)
    encoder = Encoder.load(model, device="cpu")
    assert prefixes_put(config, {"m": Towers(encoder, encoder)}) == expected


@pytest.fixture(scope="module")
def indexes(world) -> dict[str, Path]:
    """Indexes of the prompted model's corpus with its passage prompt and with none; embeddings of its queries with
    its query prompt and with none."""
    root, made = world["root"], {}
    for name, flag, file in (("docs prompted", [], "corpus"), ("docs plain", ["--passage-prefix", ""], "corpus"),
                             ("queries prompted", [], "queries"), ("queries plain", ["--query-prefix", ""], "queries")):
        side = "--corpus" if file == "corpus" else "--queries"
        assert main(["encode", "--model", str(world["model"]), side, str(world["beir"] / f"{file}.jsonl"),
                     "--output", str(root / name), "--no-progress", *flag]) == 0
        made[name] = root / name
        if file == "corpus":
            assert main(["index", "--embeddings", str(root / name), "--output", str(root / f"{name} idx")]) == 0
            made[name] = root / f"{name} idx"
    return made


PAIRS = [("queries prompted", "docs prompted", None), ("queries plain", "docs plain", None),
         ("queries prompted", "docs plain", ("query: ", "")), ("queries plain", "docs prompted", ("", "passage: "))]


@pytest.mark.parametrize("queries, documents, refused", PAIRS, ids=[f"{q}, {d}" for q, d, _ in PAIRS])
def test_query_vectors_are_searched_only_where_both_sides_have_the_model_s_prompts_or_neither(
        queries, documents, refused, indexes, world, tmp_path, capsys):
    """`search --queries EMBEDDINGS` compares the prefix each record holds with the prompts the model names."""
    argv = ["search", "--index", str(indexes[documents]), "--queries", str(indexes[queries]), "--output",
            str(tmp_path / "run.trec")]
    if refused is None:
        assert main(argv) == 0
        return
    assert main(argv) == 2
    assert error_line(capsys) == (
        f"retromae: error: --queries: {indexes[queries]} was encoded with the prefix '{refused[0]}' and the documents "
        f"of {indexes[documents]} with '{refused[1]}' (their records say so), and {world['model']} puts 'passage: ' "
        "before a passage and 'query: ' before a query: one side has the model's prompt and the other not; encode "
        "the queries again as the documents were (`retromae encode --queries` puts the model's query prompt)")
    assert not (tmp_path / "run.trec").exists()


ST_SIDE_FIELDS = [("query_length", 4), ("document_length", 4),
                  ("query_expansion", {"strategy": "fixed", "attend": False, "length": 8})]


@pytest.mark.parametrize("field, value", ST_SIDE_FIELDS, ids=[field for field, _ in ST_SIDE_FIELDS])
def test_a_folder_whose_side_lengths_would_change_vectors_is_refused(field, value, world, tmp_path, capsys):
    """sentence-transformers' `encode_query`/`encode_document` cut a query or document at query_length /
    document_length (and query_expansion pads or cuts a query): refused in one line naming the file and field, by
    the reader every loader shares (`describe_folder`); null is read."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(world["model"], model)
    path = model / "sentence_bert_config.json"
    settings = json.loads(path.read_text())
    path.write_text(json.dumps({**settings, field: None}))
    assert Encoder.load(model, device="cpu")
    path.write_text(json.dumps({**settings, field: value}))
    assert main(["encode", "--model", str(model), "--queries", str(world["beir"] / "queries.jsonl"), "--output",
                 str(tmp_path / "emb"), "--no-progress"]) == 2
    line = error_line(capsys)
    assert line.startswith(f"retromae: error: {path}: {field} is ") and f"only with {field} null" in line, line
    assert not (tmp_path / "emb").exists()
