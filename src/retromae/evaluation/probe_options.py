"""The options of the retrieval probes run while pre-training, declared apart from the probe so that parsing them
imports no torch; `retromae.pretraining.config.PretrainConfig` takes them as a mixin.

Owns `ProbeOptions` (which set, how many queries and documents, how often, which score `--keep-best-probe` keeps),
the probe's names of the registered metrics (`probe_metrics`: `ndcg@10`, `sts_spearman`, read from the registry when
asked) and `BEST_PROBE_DIR`. Does not own probing (`retromae.evaluation.probe`) or the metrics
(`retromae.evaluation.metric_registry`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from retromae.data.retrieval_sets import check_split
from retromae.evaluation.metric_registry import CORRELATION, RANKING, Metric, long_title, parse_key, reported_keys
from retromae.runtime.options import POSITIVE, SEED, Acts, Options, acts_with, option, require

BEST_PROBE_DIR = "best-probe"  # where --keep-best-probe exports (`retromae.evaluation.probe`)

STS_PREFIX = "sts_"  # the probe names of correlations, scored on --probe-sts pairs: sts_spearman



def probe_metrics(kind: str) -> dict[str, str]:
    """What one kind of probe scores, each name (its record key less `probe_`, a --probe-metric choice) → the metric's
    registry key: the reported ranking keys on --probe's queries (ndcg@10, recall@100), the reported correlations on
    --probe-sts's pairs (sts_spearman)."""
    return {(STS_PREFIX if kind == CORRELATION else "") + key: key for key in reported_keys(kind)}



class ProbeMetricChoices:
    """--probe-metric's choices, read from the metric registry when asked: a metric registered after this module
    was imported is offered too."""

    def __iter__(self) -> Iterator[str]:
        return iter({**probe_metrics(RANKING), **probe_metrics(CORRELATION)})

    def __contains__(self, name: object) -> bool:
        return name in set(self)



def _probe_help(kind: str) -> tuple[str, str, str]:
    """The help's words for one kind of probe: its metrics' titles, its record keys and its first name."""
    names = probe_metrics(kind)
    return (" and ".join(map(long_title, names.values())), ", ".join(f"probe_{name}" for name in names),
            next(iter(names)))



RETRIEVAL_HELP, STS_HELP = _probe_help(RANKING), _probe_help(CORRELATION)



@dataclass(kw_only=True)
class ProbeOptions(Options):
    """Options of the retrieval probes run while pre-training (a mixin of `PretrainConfig`)."""
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"probe": ("retrieval set", "probe_split"), "probe_sts": "sts"}

    ACTS = {**{name: acts_with("probe", on="x", off=None) for name in ("probe_split", "probe_queries",
                                                                       "probe_documents", "probe_seed")},
            **{name: Acts(lambda config: config.probing, "with --probe or --probe-sts", {"probe": "x"},
                          ({"probe": None, "probe_sts": None},)) for name in ("probe_every", "probe_batch_size")}}

    probe: str | None = option(None, "probe retrieval while training: a BEIR (or MS MARCO) folder whose --probe-split "
                                     "queries are searched zero-shot with the encoder's vector (the objective's "
                                     f"pooling: [CLS], mean for Contriever); {RETRIEVAL_HELP[0]} go into "
                                     f"metrics.jsonl as {RETRIEVAL_HELP[1]}", reads="path")
    probe_split: str = option("test", "qrels split of --probe", check=check_split)
    probe_sts: str | None = option(None, f"probe STS too (or only): an STS Benchmark tsv; {STS_HELP[0]} of cosine "
                                         f"similarities → {STS_HELP[1]}", reads="path")
    probe_every: int = option(500, "probe every N steps (a multiple of --log-every), before the first step and at "
                                   "the last", POSITIVE)
    probe_queries: int = option(200, "probe a seeded sample of at most this many judged queries", POSITIVE)
    probe_documents: int = option(5000, "probe against the sampled queries' judged documents plus a seeded sample "
                                        "of others, this many documents in all (more when the judged ones are more)",
                                        POSITIVE)
    probe_seed: int = option(0, "seed of the query and document sample (the same sample for every run)", SEED)
    probe_batch_size: int = option(128, "texts per forward pass while probing", POSITIVE)
    probe_metric: str | None = option(None, f"the probe score --keep-best-probe maximises (default: "
                                            f"{RETRIEVAL_HELP[2]}, or {STS_HELP[2]} with --probe-sts alone)",
                                      choices=ProbeMetricChoices())
    keep_best_probe: bool = option(False, "export the encoder of the best probe score to OUTPUT/best-probe/ "
                                          "(encoder/, sentence-transformer/, pretrain_head.safetensors, probe.json)")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.probe_every % self.log_every == 0 or not self.probing, "probe_every",
                f"must be a positive multiple of --log-every ({self.log_every}): probes join the logged records")
        require(self.probing or not self.keep_best_probe, "keep_best_probe", "needs --probe or --probe-sts")
        require(self.probe_metric is None or self.probe_metric_key in self.probe_keys, "probe_metric",
                f"{self.probe_metric} is not probed: {'give --probe-sts' if self.probe else 'give --probe'}")

    @property
    def probing(self) -> bool:
        return self.probe is not None or self.probe_sts is not None

    @property
    def probe_keys(self) -> list[str]:
        """The record keys the probes write (besides probe_seconds)."""
        names = [*(probe_metrics(RANKING) if self.probe else []),
                 *(probe_metrics(CORRELATION) if self.probe_sts else [])]
        return [f"probe_{name}" for name in names]

    @property
    def probe_metric_key(self) -> str:
        """The record key of the score the best probe maximises."""
        return f"probe_{self.probe_metric}" if self.probe_metric else self.probe_keys[0]

    @property
    def probe_metric_entry(self) -> Metric:
        """The registered metric of the score --keep-best-probe keeps the best of."""
        name = self.probe_metric_key.removeprefix("probe_")
        return parse_key({**probe_metrics(RANKING), **probe_metrics(CORRELATION)}[name])[0]
