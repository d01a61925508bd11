"""How much of exact search an approximate index finds on a user's queries, and its search knob set to find enough.

Owns `measure_recall`: recall@k of an index's own search (`retrieval.index.search`, as `retromae search` runs it)
against exact search over the same vectors, on encoded queries (at most `MOST_QUERIES`, a seeded sample); a
document found counts when its exact score reaches the k-th best exact score, so that an index returning one of
several equal documents (duplicates are common in real corpora) is not said to miss. And `tune`: the lowest setting
of the index's search knob (`faiss_options.search_knob`: efSearch of HNSW, nprobe of IVF, a binary index's
shortlist) whose recall reaches a target on half of the queries, tried on a ladder of settings from the cheapest,
and its recall on the other half, which played no part in the choice (the figure printed, with its 95% interval over
those queries, and a warning when the target lies above it); a target out of the index's reach is refused, naming the
recall at its most thorough setting. Does not own building or searching (`retrieval.index`).

Why queries and not the indexed vectors: documents taken as queries lie where the index was built and are found more
easily than queries are. On 100,000 documents (MiniLM) HNSW32 at efSearch 16 found 0.969 of the exact top 10 for
documents and 0.881 for 2,202 real queries; IVF256 at nprobe 1, 0.669 and 0.536 (docs/performance.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from retromae.retrieval.faiss_options import SHORTLIST_RANGE, search_knob
from retromae.retrieval.index import BinaryIndex, import_faiss, search, set_search_params
from retromae.runtime.console import progress
from retromae.runtime.errors import DataError

RECALL_K = 10  # the depth recall is measured at, as the literature reports approximate search (recall@10)
MOST_QUERIES = 1000  # queries measured at most (a seeded sample of more)
LEAST_TUNING_QUERIES = 20  # a target needs this many: half choose the setting, half measure it
SAMPLE_SEED = 0  # the same queries are drawn at every build
EF_SEARCH_MOST = 4096  # the most thorough efSearch tried (an HNSW search then visits thousands of nodes per query)
SCORE_TOLERANCE = 1e-5  # relative: an exact score this close to the k-th best counts as reaching it (float sums)
NO_KNOB = "no search knob"  # the setting said of an index searched alike whatever its parameters (int8, PQ, ...)


@dataclass(frozen=True)
class Recall:
    """recall@`k` of an index searched with `setting` (its knob, e.g. "efSearch=64") on `queries` queries; with a
    target, `chosen_on` is the recall on the other queries, which chose the setting."""

    value: float
    k: int
    queries: int
    setting: str
    interval: tuple[float, float]
    chosen_on: tuple[float, int] | None = None
    target: float | None = None

    def record(self) -> dict[str, Any]:
        """What index.json keeps of it."""
        record = {"at": self.k, "value": round(self.value, 4), "interval": [round(end, 4) for end in self.interval],
                  "queries": self.queries, "setting": self.setting}
        if self.chosen_on is not None:
            record["chosen_on"] = {"value": round(self.chosen_on[0], 4), "queries": self.chosen_on[1]}
        return record

    def line(self) -> str:
        """The line `retromae index` prints: the recall with its 95% interval over the queries, and, with a target,
        a warning when the held-out queries put the target above the interval (too few queries chose it)."""
        figure = f"{self.value:.3f} (95% interval {self.interval[0]:.3f}-{self.interval[1]:.3f})"
        if self.chosen_on is None:
            knob = self.setting.partition("=")[0]
            hint = f"; --target-recall chooses {knob} for a recall" if knob != NO_KNOB else ""
            return f"recall@{self.k} against exact search: {figure} on {self.queries:,} queries ({self.setting}{hint})"
        line = (f"recall@{self.k} against exact search: {figure} with {self.setting} on {self.queries:,} queries held "
                f"out from the choice ({self.chosen_on[0]:.3f} on the {self.chosen_on[1]:,} it was chosen on)")
        if self.target is not None and self.interval[1] < self.target:
            line += (f"; below the target {self.target} beyond its noise: the queries that chose it were too few or "
                     "unlike the others; give more --recall-queries")
        return line


def measure_recall(index: Any, vectors: np.ndarray, ids: Sequence[str], metric: str, queries: np.ndarray,
                   factory: str) -> Recall:
    """recall@`RECALL_K` of `index` (built from `factory` over `vectors` `(N, D)`, whose rows are `ids`, with
    `metric`, searched as it is set now) on `queries` `(Q, D)`."""
    knob = search_knob(factory)
    setting = f"{knob}={_knob_value(index, knob)}" if knob is not None else NO_KNOB
    return _Truth(vectors, ids, metric, _sample(queries)).recall(index, setting)


def tune(index: Any, vectors: np.ndarray, ids: Sequence[str], metric: str, queries: np.ndarray, factory: str,
         target: float) -> tuple[str, Recall]:
    """The lowest setting ("nprobe=16", "shortlist=20", ...) of `index`'s knob whose recall reaches `target` on half
    of `queries`, left set on `index`, and its recall on the other half; DataError when too few queries are given
    or the most thorough setting falls short."""
    sample = _sample(queries)
    if len(sample) < LEAST_TUNING_QUERIES:
        raise DataError(f"--recall-queries: {len(sample)} queries; --target-recall needs at least "
                        f"{LEAST_TUNING_QUERIES} (half choose the setting, half measure it)")
    knob = search_knob(factory)
    choosing, measuring = _Truth(vectors, ids, metric, sample[0::2]), _Truth(vectors, ids, metric, sample[1::2])
    with progress(f"choosing {knob} for recall@{RECALL_K} >= {target}", None, "setting") as bar:
        for value in _ladder(index, knob):
            setting = f"{knob}={value}"
            _set(index, knob, value)
            chosen = choosing.recall(index, setting)
            bar.update(1)
            if chosen.value >= target:
                held_out = measuring.recall(index, setting)
                return setting, dataclasses.replace(held_out, chosen_on=(chosen.value, chosen.queries), target=target)
    raise DataError(f"--target-recall {target}: this {factory} index reaches recall@{RECALL_K} {chosen.value:.3f} at "
                    f"its most thorough setting ({setting}): its codes lose more than a longer search finds again; "
                    "give a --factory that keeps more of each vector (e.g. add ,RFlat to rescore with the float "
                    "vectors, or SQ8 for PQ) or a lower --target-recall")


def _sample(queries: np.ndarray) -> np.ndarray:
    """At most `MOST_QUERIES` rows of `queries`, drawn with `SAMPLE_SEED`, in their order, as float32; DataError for
    none (a recall of no query is no figure)."""
    if len(queries) == 0:
        raise DataError("--recall-queries: the folder holds no query vectors; encode some queries with "
                        "`retromae encode --queries`")
    rows = np.arange(len(queries))
    if len(rows) > MOST_QUERIES:
        rows = np.sort(np.random.default_rng(SAMPLE_SEED).choice(len(rows), MOST_QUERIES, replace=False))
    return np.ascontiguousarray(queries[rows], dtype=np.float32)


def _ladder(index: Any, knob: str) -> Iterator[int]:
    """The settings of `knob` tried, cheapest first: 1, 1.5, 2, 3, 4, 6, ... times a power of two from the knob's
    least useful value up to its most thorough one (every list of an IVF index), which ends the ladder."""
    faiss = import_faiss()
    low, high = {"efSearch": (16, EF_SEARCH_MOST), "shortlist": (1, int(SHORTLIST_RANGE.high)),
                 "nprobe": (1, faiss.extract_index_ivf(index).nlist if knob == "nprobe" else 1)}[knob]
    step = low
    while step < high:
        yield step
        if step > 1 and step * 3 // 2 < min(2 * step, high):
            yield step * 3 // 2
        step *= 2
    yield high


def _set(index: Any, knob: str, value: int) -> None:
    """Set `index`'s search `knob` to `value` (a binary index's shortlist is ours, the others faiss's)."""
    if isinstance(index, BinaryIndex):
        index.shortlist = value
    else:
        set_search_params(index, f"{knob}={value}")


def _knob_value(index: Any, knob: str) -> int:
    """What `index`'s search `knob` is set to now (faiss's default unless --params set it)."""
    if isinstance(index, BinaryIndex):
        return index.shortlist
    faiss = import_faiss()
    if knob == "nprobe":
        return int(faiss.extract_index_ivf(index).nprobe)
    index = faiss.downcast_index(index)
    while not isinstance(index, faiss.IndexHNSW):  # through the wrappers (PreTransform, Refine)
        index = faiss.downcast_index(getattr(index, "index", None) or index.base_index)
    return int(index.hnsw.efSearch)


class _Truth:
    """Queries of a recall measure and, per query, the k-th best exact score over the indexed vectors (computed
    once by faiss's exact k-NN)."""

    def __init__(self, vectors: np.ndarray, ids: Sequence[str], metric: str, queries: np.ndarray) -> None:
        faiss = import_faiss()
        self.vectors, self.ids, self.metric = vectors, ids, metric
        self.queries, self.k = queries, min(RECALL_K, len(vectors))
        exact, _ = faiss.knn(queries, np.ascontiguousarray(vectors, dtype=np.float32), self.k,
                             metric=faiss.METRIC_INNER_PRODUCT if metric == "ip" else faiss.METRIC_L2)
        self.floor = exact[:, -1] if metric == "ip" else -exact[:, -1]  # (Q,) the k-th best, higher is better

    def recall(self, index: Any, setting: str) -> Recall:
        """recall@k of `index` on the queries."""
        _, found = search(index, self.queries, self.k, ids=self.ids)  # (Q, k), -1 where nothing was found
        rows = self.vectors[np.where(found < 0, 0, found).ravel()].reshape(*found.shape, -1)  # (Q, k, D)
        products = np.einsum("qkd,qd->qk", rows, self.queries)
        scores = products if self.metric == "ip" else -((rows - self.queries[:, None, :]) ** 2).sum(-1)
        reached = (scores >= self.floor[:, None] - SCORE_TOLERANCE * (1 + np.abs(self.floor[:, None]))) & (found >= 0)
        per_query = reached.sum(1) / self.k  # (Q,)
        value = float(per_query.mean())
        margin = 1.96 * float(per_query.std(ddof=1)) / np.sqrt(len(per_query)) if len(per_query) > 1 else 0.0
        return Recall(value, self.k, len(per_query), setting, (max(0.0, value - margin), min(1.0, value + margin)))
