"""What `retromae adapt` reads and checks before it trains: the base's similarity, the corpus, the validation split.

Owns: `base_pooling` (the pooling and normalisation the base declares, or the one error naming what is missing),
`split_corpus` (documents held out of training, each turned into a query of the kind the objective does not train on,
`retromae.adaptation.queries.validation_kind`: a keyword query, a few of its highest tf-idf words, the document
searched for whole; or a passage query, a sentence or word window taken out of it, the rest searched for; both kinds
any text gives, with or without sentence marks), the files the split leaves in the output folder
(`OUTPUT/data/train.jsonl`, `OUTPUT/validation/` as a BEIR folder that `retromae evaluate` reads) and the input checks
(a corpus too small to hold documents out, a corpus the tokenizer cannot read). The corpus is held in memory while it
is split (a random sample needs every document). Does not own reading corpora (`retromae.data.corpus`), retrieval
sets (`retromae.data.retrieval_sets`) or how queries are made (`retromae.adaptation.queries`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retromae.adaptation.queries import KEYWORDS, MIN_REST_WORDS, KeywordQueries, passage_query
from retromae.data.corpus import Document, iter_corpus
from retromae.data.fields import UniqueIds
from retromae.models.encoder import describe_folder
from retromae.models.encoder_config import PoolingConfig
from retromae.models.model_source import ENCODER_FILE, check_unknown_share, resolve_model
from retromae.runtime.errors import DataError
from retromae.runtime.io import atomic_directory, write_text_atomic
from retromae.runtime.options import ConfigError

MIN_HELD_OUT = 20  # the fewest pseudo-queries whose NDCG@10 can tell candidates apart at all
HELD_OUT_SHARE = 10  # at most one document in this many is held out of training
TOKENIZER_SAMPLE_DOCUMENTS = 200  # documents whose tokens are checked for [UNK] before anything else runs


def base_pooling(model: str, pooling: str | None, normalize: bool | None) -> PoolingConfig:
    """The pooling the base is used with: --pooling/--normalize, else what its folder declares (our
    retromae_encoder.json, or a sentence-transformers modules.json with its Pooling and optional Normalize); a base
    that declares none and is given none is a ConfigError naming what is missing and the option that sets it. The
    folder is described either way, so that a folder refused (`describe_folder`) is refused before anything is
    written."""
    spec = describe_folder(resolve_model(model).folder)  # a local folder, or a hub repository's files
    if pooling is not None:
        return PoolingConfig(pooling, bool(normalize))
    if not spec.declared:
        raise ConfigError(f"--model {model}: declares no pooling (no sentence-transformers modules.json with a "
                          f"Pooling module, no {ENCODER_FILE}); give the pooling it was trained with: --pooling cls "
                          "or --pooling mean, with --normalize if its vectors are compared by cosine")
    return spec.pooling


@dataclass
class Split:
    """Training documents, held-out queries (query id → text) and their targets (id → text: the document, whole for
    a keyword query, without the query's passage for a passage query)."""

    training: list[Document]
    queries: dict[str, str]
    documents: dict[str, str]


def read_documents(sources: list[str]) -> list[Document]:
    """Every non-empty document of the corpus, in order; an id given twice is refused naming both places
    (`data.fields.UniqueIds`)."""
    seen = UniqueIds()
    documents = []
    for document in iter_corpus(sources):
        seen.add(document.doc_id, document.where or document.doc_id)
        if document.text.strip():
            documents.append(document)
    return documents


def split_corpus(documents: list[Document], held_out: int, seed: int, where: str, kind: str = "keywords") -> Split:
    """Hold out at most `held_out` documents (and a tenth of the corpus at most) that give a query of `kind`
    ("keywords" or "passage"); the others train. DataError naming the counts when fewer than MIN_HELD_OUT can."""
    rng = np.random.default_rng(seed)
    room = min(held_out, len(documents) // HELD_OUT_SHARE)
    make = held_out_query(documents, kind)
    queries: dict[str, str] = {}
    targets: dict[str, str] = {}
    kept: list[int] = []
    for index in rng.permutation(len(documents)).tolist():
        if len(kept) == room:
            break
        pair = make(documents[index], rng)
        if pair is not None:
            queries[f"q{len(kept)}"], targets[f"d{len(kept)}"] = pair
            kept.append(index)
    if len(kept) < MIN_HELD_OUT:
        usable = "" if room < MIN_HELD_OUT else f", and only {len(kept)} {NEEDS[kind]}"
        raise DataError(f"{where}: too small for a validation split: {len(documents):,} documents, of which at most "
                        f"{room} (one in {HELD_OUT_SHARE}) may be held out{usable}; the guard needs {MIN_HELD_OUT}; "
                        f"give a larger corpus (at least {MIN_HELD_OUT * HELD_OUT_SHARE:,} documents) or your own "
                        "labelled queries with --validation")
    held = set(kept)
    return Split([document for index, document in enumerate(documents) if index not in held], queries, targets)


# What a document needs to give a query of each kind, as the error of a corpus with too few such documents says it.
NEEDS = {"keywords": f"have {KEYWORDS[0]} distinct content words",
         "passage": f"have a sentence (or a word window) and {MIN_REST_WORDS} words besides"}


def held_out_query(documents: list[Document],
                   kind: str) -> Callable[[Document, np.random.Generator], tuple[str, str] | None]:
    """document, rng → (query, target) or None, for queries of `kind`."""
    if kind == "passage":
        return passage_query
    keywords = KeywordQueries([document.text for document in documents])

    def keyword_pair(document: Document, rng: np.random.Generator) -> tuple[str, str] | None:
        query = keywords.query(document.text, rng)
        return None if query is None else (query, document.text)

    return keyword_pair


def check_language(tokenizer, documents: list[Document], model: str, where: str) -> None:
    """DataError with the measured share when the base's tokenizer reads a sample of the corpus as mostly [UNK]."""
    sample = [document.text for document in documents[:TOKENIZER_SAMPLE_DOCUMENTS]]
    ids = [token for row in tokenizer(sample, add_special_tokens=False)["input_ids"] for token in row]
    check_unknown_share(tokenizer, ids, model, where)


def write_training_corpus(documents: list[Document], path: Path) -> None:
    """The training documents as JSON lines ({"text"}: pre-training reads no id, and a default id, the source's
    FILE:LINE, may hold a space, which the id rule refuses), written atomically."""
    lines = [json.dumps({"text": document.text}, ensure_ascii=False) for document in documents]
    write_text_atomic(path, "\n".join(lines) + "\n")


def write_validation(split: Split, distractors: int, seed: int, folder: Path) -> None:
    """The held-out pseudo-queries as a BEIR folder: each query's document (relevant), plus the training documents
    (not relevant), all of them when the corpus has at most `distractors` documents, else a seeded sample up to
    `distractors` in all; `retromae evaluate --data` reads it."""
    training = split.training
    rng = np.random.default_rng(seed + 1)
    room = max(0, distractors - len(split.documents))
    picked = sorted(rng.choice(len(training), size=min(room, len(training)), replace=False).tolist())
    corpus = [{"_id": doc_id, "title": "", "text": text} for doc_id, text in split.documents.items()]
    corpus += [{"_id": f"t{i}", "title": "", "text": training[i].text} for i in picked]
    with atomic_directory(folder) as staging:
        (staging / "qrels").mkdir()
        write_text_atomic(staging / "corpus.jsonl", "".join(json.dumps(row, ensure_ascii=False) + "\n"
                                                            for row in corpus))
        write_text_atomic(staging / "queries.jsonl", "".join(json.dumps({"_id": qid, "text": text},
                                                                        ensure_ascii=False) + "\n"
                                                             for qid, text in split.queries.items()))
        qrels = ["query-id\tcorpus-id\tscore"] + [f"q{n}\td{n}\t1" for n in range(len(split.queries))]
        write_text_atomic(staging / "qrels" / "test.tsv", "\n".join(qrels) + "\n")
