"""Hard-negative mining: rank a training set's passages for each of its queries, keep negatives from a rank window.

Owns ranking with BM25 (`bm25_rankings`) or with a dense encoder (`dense_rankings`), and choosing negatives from
rankings (`choose_negatives`): never a positive, never the query itself (a passage whose text is the query's own text,
or, from a data set's folder, whose id is the query's: `data.ranking.is_the_query`), sampled without replacement from
the window. Used by `retromae mine`, by `retromae finetune --negatives bm25|model` and by the ANCE-style refresh
during training. Does not own its options (`retrieval.mining_options`), reading or writing
training files (`data.training_groups`) or the index (`retrieval.index`).
"""

from __future__ import annotations

import numpy as np

from retromae.data.ranking import is_the_query, ranked
from retromae.data.training_groups import TrainingSet
from retromae.models.encoder import Encoder, side_prefix
from retromae.retrieval.bm25 import BM25
from retromae.retrieval.index import build_index, search
from retromae.retrieval.mining_options import MiningOptions
from retromae.runtime.console import step


def _normalised(text: str) -> str:
    return " ".join(text.casefold().split())


def choose_negatives(data: TrainingSet, rankings: list[list[int]], options: MiningOptions,
                     seed: int = 0) -> list[list[int]]:
    """Per example, up to `negatives_per_query` passage rows drawn from ranks [rank_start, rank_end] of its
    ranking (best first), after removing its positives and the query itself: a passage equal to its query text, or,
    where the ids are the passages' own (`TrainingSet.ids_given`: a folder's, a file's), under its query's id
    (`data.ranking.is_the_query`); kept in rank order."""
    rng = np.random.default_rng(seed)
    chosen = []
    for example, ranking in zip(data.examples, rankings, strict=True):
        excluded = set(example.positives)
        query = _normalised(example.query)
        window = [row for row in ranking[options.rank_start - 1:options.rank_end]
                  if row not in excluded and _normalised(data.texts[row]) != query
                  and not (data.ids_given and is_the_query(example.query_id, data.ids[row]))]
        if len(window) > options.negatives_per_query:
            keep = np.sort(rng.choice(len(window), options.negatives_per_query, replace=False))
            window = [window[i] for i in keep]
        chosen.append(window)
    return chosen


def bm25_rankings(data: TrainingSet, depth: int, show_progress: bool = True) -> list[list[int]]:
    """Per example, passage rows ranked by BM25 (bm25s), best first (ties by passage id, `data.ranking`), at most
    `depth`; one status line."""
    queries = {str(n): example.query for n, example in enumerate(data.examples)}
    with step(f"mining: BM25 over {len(data.texts):,} passages for {len(queries):,} queries", show_progress):
        engine = BM25().index(data.ids, data.texts)
        run = engine.search(queries, k=depth)
    rows = {doc_id: row for row, doc_id in enumerate(data.ids)}
    return [[rows[doc_id] for doc_id in ranked(run[str(n)])] for n in range(len(data.examples))]


def dense_rankings(encoder: Encoder, data: TrainingSet, depth: int, batch_size: int = 64,
                   query_max_length: int | None = None, passage_max_length: int | None = None,
                   show_progress: bool = True, query_encoder: Encoder | None = None, query_prefix: str | None = None,
                   passage_prefix: str | None = None) -> list[list[int]]:
    """Per example, passage rows ranked by inner product (exact search), best first (ties by passage id), at most
    `depth`; queries go through `query_encoder` when the towers are separate. Each side gets the prefix `side_prefix`
    puts (`query_prefix`, `passage_prefix` as given; None: the model's named prompt), as `evaluate` ranks."""
    questions = query_encoder or encoder
    passages = encoder.encode(data.texts, batch_size=batch_size, max_length=passage_max_length,
                              prefix=side_prefix(encoder, "passage", passage_prefix), show_progress=show_progress,
                              description=f"mining: encoding passages ({len(data.texts):,} texts)")  # (N, D)
    queries = questions.encode(
        [example.query for example in data.examples], batch_size=batch_size, max_length=query_max_length,
        prefix=side_prefix(questions, "query", query_prefix), show_progress=show_progress,
        description=f"mining: encoding queries ({len(data.examples):,} texts)")  # (Q, D)
    _, rows = search(build_index(passages, "Flat"), queries, depth, ids=data.ids)  # (Q, k), k capped at N
    return [[int(row) for row in ranked if row >= 0] for ranked in rows]
