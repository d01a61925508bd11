"""One truth for a model's max length and pooling: every kind of folder we write (init-model's, the quickstart's
initial model, pre-training's and fine-tuning's encoder/ and sentence-transformer/) gives the same vectors through
`retromae encode`, `retromae evaluate` and `SentenceTransformer(folder)`, texts longer than the recorded length
included."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_sentences, tiny_bert_config, tiny_pretrain_config

from retromae.cli import main
from retromae.data.retrieval_sets import load_corpus, load_queries

MODEL_KINDS = ("init-model", "quickstart initial model", "pretrain encoder", "pretrain sentence-transformer",
               "finetune encoder", "finetune sentence-transformer", "finetune (from a declared-length "
               "sentence-transformers model) encoder", "finetune (from a declared-length sentence-transformers model) "
               "sentence-transformer")


def long_beir(folder: Path) -> Path:
    """A BEIR folder whose documents and first query are long (hundreds of tokens) and the rest short."""
    (folder / "qrels").mkdir(parents=True)
    documents = [" ".join(make_sentences(count, seed=i)) for i, count in enumerate((40, 1, 12, 2, 30, 1))]
    queries = [" ".join(make_sentences(10, seed=9)), "dense retrieval", "the encoder learns"]
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n"
                                                 for i, text in enumerate(documents)))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": text}) + "\n"
                                                  for i, text in enumerate(queries)))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(len(queries))))
    return folder


def declared_sentence_transformer(folder: Path, tokenizer) -> Path:
    """A sentence-transformers folder as the hub has them (sentence_bert_config.json max_seq_length 24, mean pooling)
    beside a tokenizer that declares no limit: the case where the exports disagreed."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertModel

    torch.manual_seed(0)
    BertModel(tiny_bert_config(len(tokenizer))).save_pretrained(folder / "hf")
    tokenizer.save_pretrained(folder / "hf")
    transformer = Transformer(str(folder / "hf"), max_seq_length=24)
    SentenceTransformer(modules=[transformer, Pooling(32, "mean")], device="cpu").save(str(folder / "st"))
    (folder / "st" / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 24}))
    config = json.loads((folder / "st" / "tokenizer_config.json").read_text())
    config.pop("model_max_length", None)
    (folder / "st" / "tokenizer_config.json").write_text(json.dumps(config))
    return folder / "st"


class Written:
    """Every kind of folder we write, each built when a test first asks for it (name → folder, recorded length)."""

    def __init__(self, root: Path, tokenizer) -> None:
        self.root, self.tokenizer = root, tokenizer
        self.beir = long_beir(root / "beir")
        self.folders: dict[str, tuple[Path, int]] = {}

    def __getitem__(self, kind: str) -> tuple[Path, int]:
        if kind not in self.folders:
            build = {"init-model": self._init_model, "quickstart initial model": self._quickstart,
                     "pretrain": self._pretrain, "finetune": self._finetune_pretrained,
                     "finetune (from a declared-length sentence-transformers model)": self._finetune_declared}
            build[kind.rsplit(" ", 1)[0] if kind.endswith(("encoder", "sentence-transformer")) else kind]()
        return self.folders[kind]

    def _init_model(self) -> None:
        self.tokenizer.save_pretrained(self.root / "tokenizer")
        assert main(["init-model", "--output", str(self.root / "init"), "--tokenizer", str(self.root / "tokenizer"),
                     "--hidden-size", "64", "--layers", "1", "--max-positions", "64"]) == 0
        self.folders["init-model"] = (self.root / "init", 64)

    def _quickstart(self) -> None:
        from retromae.workflows.config import PRESETS
        from retromae.workflows.quickstart import initial_model, model_length

        budget = dataclasses.replace(PRESETS["cpu"], vocab_size=200, hidden_size=64, layers=1)
        folder = initial_model([str(self.beir / "corpus.jsonl")], budget, self.root / "initial-model", seed=0)
        self.folders["quickstart initial model"] = (folder, model_length(budget))

    def _pretrain(self) -> None:
        from retromae.pretraining.run import pretrain

        init, length = self["init-model"]
        pretrain(tiny_pretrain_config(init, self.beir / "corpus.jsonl", self.root / "pretrain", max_steps=2,
                                      save_every=0))
        self._add("pretrain", self.root / "pretrain", length)

    def _finetune(self, name: str, source: Path, length: int) -> None:
        from retromae.finetuning.config import FinetuneConfig
        from retromae.finetuning.run import finetune

        output = finetune(FinetuneConfig(model=str(source), data=str(self.beir), split="test", max_steps=1,
                                         output=str(self.root / name), batch_size=3, save_every=0, normalize=True))
        self._add(name, output, length)

    def _finetune_pretrained(self) -> None:
        self._finetune("finetune", self.root / "pretrain", self["pretrain encoder"][1])

    def _finetune_declared(self) -> None:
        self._finetune("finetune (from a declared-length sentence-transformers model)",
                       declared_sentence_transformer(self.root / "declared", self.tokenizer), 24)

    def _add(self, name: str, output: Path, length: int) -> None:
        for kind in ("encoder", "sentence-transformer"):
            self.folders[f"{name} {kind}"] = (output / kind, length)


@pytest.fixture(scope="module")
def written(tmp_path_factory, tiny_tokenizer) -> Written:
    return Written(tmp_path_factory.mktemp("lengths"), tiny_tokenizer)


def encode_command(model: Path, beir: Path, output: Path) -> dict[str, np.ndarray]:
    """`retromae encode` of the corpus and of the queries: id → vector."""
    vectors = {}
    for option, file in (("--corpus", "corpus.jsonl"), ("--queries", "queries.jsonl")):
        folder = output / file
        assert main(["encode", "--model", str(model), option, str(beir / file), "--output", str(folder),
                     "--no-progress"]) == 0
        ids = (folder / "ids.txt").read_text().split()
        vectors |= dict(zip(ids, np.load(folder / "embeddings.npy"), strict=True))
    return vectors


def evaluate_command(model: Path, beir: Path, monkeypatch) -> dict[str, np.ndarray]:
    """The vectors `retromae evaluate` searches with: id → vector."""
    from retromae.retrieval import search as retrieval_search

    seen = {}
    search = retrieval_search.vector_search

    def keep(doc_ids, doc_vectors, query_ids, query_vectors, *args, **kwargs):
        seen.update(zip(doc_ids, doc_vectors, strict=True))
        seen.update(zip(query_ids, query_vectors, strict=True))
        return search(doc_ids, doc_vectors, query_ids, query_vectors, *args, **kwargs)

    monkeypatch.setattr(retrieval_search, "vector_search", keep)  # evaluation.run imports it when it searches
    assert main(["evaluate", "--model", str(model), "--data", str(beir), "--split", "test"]) == 0
    return seen


def sentence_transformers_vectors(model: Path, beir: Path):
    """`SentenceTransformer(model)`'s vectors (id → vector) and the model itself."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model), device="cpu")
    texts = {key: passage.joined() for key, passage in load_corpus(beir / "corpus.jsonl").items()}
    texts |= load_queries(beir / "queries.jsonl")
    return dict(zip(texts, st.encode(list(texts.values()), convert_to_numpy=True), strict=True)), st


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_encode_evaluate_and_sentence_transformers_give_the_same_vectors(written, kind, tmp_path, monkeypatch):
    from retromae.models.encoder import Encoder

    model, length = written[kind]
    beir = written.beir
    encoder = Encoder.load(model)
    assert encoder.max_length == length
    ours = encode_command(model, beir, tmp_path)
    evaluated = evaluate_command(model, beir, monkeypatch)
    theirs, st = sentence_transformers_vectors(model, beir)
    assert st.max_seq_length == length
    longest = max(len(ids) for ids in encoder.tokenizer([p.joined() for p in load_corpus(beir / "corpus.jsonl")
                                                         .values()])["input_ids"])
    assert longest > length  # the long documents are truncated: the recorded length decides their vectors
    for key in ours:
        np.testing.assert_allclose(evaluated[key], ours[key], atol=1e-5, err_msg=key)
        np.testing.assert_allclose(theirs[key], ours[key], atol=1e-5, err_msg=key)
