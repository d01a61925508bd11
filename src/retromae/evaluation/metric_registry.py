"""Every metric retromae computes, prints and chooses by, as one registry: adding a metric is one `register` entry.

Owns: what a metric is (`Metric`: its name, the function computing it, higher-is-better, its titles and format, the
keys at which it is reported by default) and the registry of them, in the order results list them. A ranking metric
(`RankingMetric`) scores one query at a cut-off k (key `NAME@K`, e.g. `ndcg@10`) from its judged, ranked documents
(`JudgedRanking`), with the definitions of trec_eval (and so pytrec_eval and BEIR): graded gains with a log2 discount
and the ideal ranking taken from the qrels (`ndcg_cut_k`), a document is relevant when its grade is > 0 (`recall_k`,
`P_k`, `map_cut_k`), and MRR@k is the reciprocal rank of the first relevant document in the top k (`recip_rank` on
the run cut at k). A correlation metric (`CorrelationMetric`, key `NAME`) scores STS pairs' similarities against
the gold scores. The reported keys (`reported_keys`) are the ones shown when nobody asks for others: the columns of
`retromae evaluate`'s table and of `retromae report`, and what the pre-training probe records; the first ranking
one is the primary metric (`primary_key`: what `retromae adapt`'s guard selects by).

Users: `evaluation.metrics` (averaging over queries), `evaluation.sts`, `evaluation.table`, `evaluation.config`,
`evaluation.experiments`, `evaluation.probe` and the probe options (`retromae.pretraining.config`),
`retromae.workflows.quickstart` and `retromae.adaptation.guard`. Torch-, numpy- and scipy-free, so that `--help` and
`retromae evaluate --run` stay fast. Does not own averaging, reading files or running models.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

RANKING, CORRELATION = "ranking", "correlation"
DEFAULT_SPEC = ".4f"  # how values print: 4 decimals


@dataclass(frozen=True)
class JudgedRanking:
    """One query's ranked documents as the ranking metrics read them: the grade of each (0 when unjudged or negative),
    the relevant grades in ideal order, and the 1-based ranks of the relevant documents."""

    gains: list[int]
    ideal: list[int]
    hit_ranks: list[int]

    @classmethod
    def of(cls, judged: dict[str, int], ranking: list[str]) -> JudgedRanking:
        """From a query's judgments (docid → grade) and its ranked document ids."""
        gains = [max(judged.get(docid, 0), 0) for docid in ranking]
        return cls(gains, sorted((grade for grade in judged.values() if grade > 0), reverse=True),
                   [position + 1 for position, gain in enumerate(gains) if gain > 0])

    @property
    def relevant(self) -> int:
        """How many documents the judgments call relevant (grade > 0), ranked or not."""
        return len(self.ideal)

    def hits(self, k: int) -> list[int]:
        """The 1-based ranks of the relevant documents in the top k."""
        return [hit_rank for hit_rank in self.hit_ranks if hit_rank <= k]


@dataclass(frozen=True)
class Metric:
    """What every metric states. `title` heads a table's column (R@100), `long_title` names it in prose and in the
    quickstart's table (Recall@100); `spec` formats its values."""

    kind: ClassVar[str]  # RANKING or CORRELATION
    values: ClassVar[tuple[float, float]]  # the range every value lies in (a plot's axis never leaves it)
    name: str
    title: str
    long_title: str
    higher_is_better: bool = True
    spec: str = DEFAULT_SPEC

    def show(self, value: float) -> str:
        """A value as tables print it."""
        return format(value, self.spec)

    def better(self, value: float, than: float) -> bool:
        """Whether `value` is strictly better than `than`."""
        return value > than if self.higher_is_better else value < than

    def best(self, values: Iterable[float]) -> float | None:
        """The best of `values`, None for none."""
        return (max if self.higher_is_better else min)(values, default=None)

    def reported_keys(self) -> tuple[str, ...]:
        """The keys of this metric shown when nobody asks for others."""
        raise NotImplementedError


@dataclass(frozen=True)
class RankingMetric(Metric):
    """A metric of one query's ranking at a cut-off k: `compute(query, k)`, averaged over the queries (a query the
    run misses scores on an empty ranking); `reported_at`: its cut-offs among the reported keys."""

    kind: ClassVar[str] = RANKING
    values: ClassVar[tuple[float, float]] = (0.0, 1.0)  # fractions
    compute: Callable[[JudgedRanking, int], float] = field(kw_only=True)
    reported_at: tuple[int, ...] = field(default=(), kw_only=True)

    def reported_keys(self) -> tuple[str, ...]:
        return tuple(f"{self.name}@{k}" for k in self.reported_at)


@dataclass(frozen=True)
class CorrelationMetric(Metric):
    """A metric of STS pairs: `compute(similarities, gold)` over every pair (two float64 arrays of shape (N,));
    `reported`: whether it is among the reported keys."""

    kind: ClassVar[str] = CORRELATION
    values: ClassVar[tuple[float, float]] = (-1.0, 1.0)
    compute: Callable[[Sequence[float], Sequence[float]], float] = field(kw_only=True)
    reported: bool = field(default=False, kw_only=True)

    def reported_keys(self) -> tuple[str, ...]:
        return (self.name,) if self.reported else ()


def _dcg(gains: Sequence[float]) -> float:
    return sum(gain / math.log2(position + 2) for position, gain in enumerate(gains))


def ndcg(query: JudgedRanking, k: int) -> float:
    ideal_dcg = _dcg(query.ideal[:k])
    return _dcg(query.gains[:k]) / ideal_dcg if ideal_dcg > 0 else 0.0


def reciprocal_rank(query: JudgedRanking, k: int) -> float:
    hits = query.hits(k)
    return 1.0 / hits[0] if hits else 0.0


def recall(query: JudgedRanking, k: int) -> float:
    return len(query.hits(k)) / query.relevant if query.relevant else 0.0


def average_precision(query: JudgedRanking, k: int) -> float:
    average = sum((found + 1) / hit_rank for found, hit_rank in enumerate(query.hits(k)))
    return average / query.relevant if query.relevant else 0.0


def precision(query: JudgedRanking, k: int) -> float:
    return len(query.hits(k)) / k


def pearson(similarities: Sequence[float], gold: Sequence[float]) -> float:
    from scipy import stats  # scipy only where correlations are computed: `evaluate --run` and --help load none

    return float(stats.pearsonr(similarities, gold)[0])


def spearman(similarities: Sequence[float], gold: Sequence[float]) -> float:
    from scipy import stats  # as in `pearson`

    return float(stats.spearmanr(similarities, gold)[0])


METRICS: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add `metric` after the others (results list metrics in registration order); ValueError for a taken name
    or one a key cannot hold."""
    if metric.name in METRICS:
        raise ValueError(f"a metric named {metric.name!r} is registered already")
    if not metric.name or "@" in metric.name or any(character.isspace() for character in metric.name):
        raise ValueError(f"metric {metric.name!r}: a key needs a name without '@' or spaces")
    METRICS[metric.name] = metric
    return metric


register(RankingMetric("ndcg", "NDCG", "NDCG", compute=ndcg, reported_at=(10,)))
register(RankingMetric("mrr", "MRR", "MRR", compute=reciprocal_rank))
register(RankingMetric("recall", "R", "Recall", compute=recall, reported_at=(100,)))
register(RankingMetric("map", "MAP", "MAP", compute=average_precision))
register(RankingMetric("p", "P", "P", compute=precision))
register(CorrelationMetric("pearson", "Pearson", "Pearson", compute=pearson))
register(CorrelationMetric("spearman", "Spearman", "Spearman", compute=spearman, reported=True))


def metrics(kind: str | None = None) -> list[Metric]:
    """The registered metrics of one kind (RANKING or CORRELATION) in registration order; of both: the ranking
    metrics first."""
    return [metric for wanted in ((kind,) if kind else (RANKING, CORRELATION)) for metric in METRICS.values()
            if metric.kind == wanted]


def reported_keys(kind: str | None = None) -> list[str]:
    """The keys shown when nobody asks for others (of one kind), e.g. ndcg@10, recall@100, spearman."""
    return [key for metric in metrics(kind) for key in metric.reported_keys()]


def primary_key() -> str:
    """The ranking metric a choice is made by (sentence-transformers' `primary_metric`): the first reported one."""
    return reported_keys(RANKING)[0]


def find_key(key: str) -> tuple[Metric, int | None] | None:
    """The metric of a key (`NAME@K` for a ranking metric, `NAME` for a correlation) and its cut-off (None for a
    correlation); None for a key no registered metric has."""
    name, at, k = key.partition("@")
    metric = METRICS.get(name)
    if metric is None or not (not at if metric.kind == CORRELATION else k.isascii() and k.isdigit() and int(k) >= 1):
        return None
    return metric, int(k) if at else None


def parse_key(key: str, kind: str | None = None) -> tuple[Metric, int | None]:
    """`find_key`, but ValueError for a key no registered metric (of `kind`, when given) has."""
    found = find_key(key)
    if found is None or kind not in (None, found[0].kind):
        raise ValueError(f"{key!r} is not a {kind + ' ' if kind else ''}metric")
    return found


def canonical_key(text: str, kind: str | None = None) -> str:
    """The one form of a metric key a user names (`--metrics`, a config's `metrics`): `NAME@K` with K as plain
    decimal writes it (`ndcg@010` and `ndcg@10` are one metric, so one key, ndcg@10), `NAME` for a correlation;
    ValueError (`parse_key`) for a key no registered metric (of `kind`) has."""
    metric, k = parse_key(text, kind)
    return metric.name if k is None else f"{metric.name}@{k}"


def cutoffs(keys: Sequence[str]) -> list[int]:
    """The cut-offs ranking keys need, ascending (correlation keys need none)."""
    return sorted({k for key in keys if (k := parse_key(key)[1]) is not None})


def title(key: str) -> str:
    """A key's column title: ndcg@10 → NDCG@10, recall@100 → R@100."""
    metric, k = parse_key(key)
    return metric.title if k is None else f"{metric.title}@{k}"


def long_title(key: str) -> str:
    """A key's name in prose: recall@100 → Recall@100."""
    metric, k = parse_key(key)
    return metric.long_title if k is None else f"{metric.long_title}@{k}"


def show(key: str, value: float) -> str:
    """A value of `key` as tables print it: in its metric's format (4 decimals for a key no metric has)."""
    found = find_key(key)
    return found[0].show(value) if found else format(value, DEFAULT_SPEC)
