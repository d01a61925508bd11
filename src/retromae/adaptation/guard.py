"""The guard of `retromae adapt`: score the base and every candidate on the validation set, pick the best, and
export it only when it beats the base beyond the validation set's own noise.

Owns: the candidates (the last checkpoint of the training stage, or each, at each weight of its average with the
base: WiSE-FT's θ = w·θ_adapted + (1 − w)·θ_base), reading a checkpoint's encoder out of its training state, scoring
an encoder state (the primary metric of the metric registry, NDCG@10, per query and on average, of a dense search
of the validation queries, with the base's pooling, similarity and max length), and the decision: the best candidate
on average is exported only when the lower end of a seeded paired bootstrap interval of its gain over the base (per
query, INTERVAL_LEVEL, BOOTSTRAP_RESAMPLES resamples of the queries) is above 0; otherwise the base is the result,
unchanged. The gain is measured in NDCG@10 points and as a share of the base's score (`Gain`): the held-out queries
may be much harder or easier than a user's (the base scores 0.09 to 0.70 on them where it scores 0.43 to 0.71 on the
development collections' real queries), and a gain in points follows that level (how far each is from the real gain:
docs/RESULTS.md, section 10.7). Does not own the training (`retromae.pretraining.run`,
`retromae.adaptation.distill`), search or metrics (`retromae.retrieval`, `retromae.evaluation.metric_registry`).
The base and every candidate are scored with the run's prefixes (`finetuning.run.training_prefixes`), the prompts the
export names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from retromae.data.ranking import Run
from retromae.data.retrieval_sets import RetrievalSet
from retromae.evaluation.metric_registry import parse_key, primary_key
from retromae.evaluation.metrics import evaluate_run, retrieval_depth, scored_run
from retromae.models.encoder import Encoder
from retromae.retrieval.bm25 import bm25_search
from retromae.retrieval.fusion import candidate_depth, fuse
from retromae.retrieval.search import TextOptions, dense_search
from retromae.runtime.console import progress
from retromae.runtime.errors import ModelLoadError
from retromae.training.checkpoint_state import MODEL_FILE, read_model_tensors

METRIC = primary_key()  # ndcg@10
CUTOFF = parse_key(METRIC)[1]  # the hits METRIC reads (10)
BOOTSTRAP_RESAMPLES = 2000
INTERVAL_LEVEL = 0.95


@dataclass(frozen=True)
class Gain:
    """A candidate's gain over the base on the validation queries, with its seeded paired bootstrap intervals: in
    METRIC points, and relative (candidate / base − 1; None when the base scores 0 in some resample)."""

    absolute: float
    interval: tuple[float, float]
    relative: float | None
    relative_interval: tuple[float, float] | None


@dataclass
class Candidate:
    """One encoder the guard scores: the base (step 0), or a checkpoint's encoder averaged with the base at `weight`."""

    step: int
    weight: float
    score: float | None = None
    per_query: dict[str, float] | None = None  # query id → METRIC
    run: Run | None = None  # its best `candidate_depth(CUTOFF)` per validation query: what a hybrid with BM25 fuses
    gain: Gain | None = None  # over the base (the base: none)

    @property
    def name(self) -> str:
        if self.step == 0:
            return "base"
        return f"step {self.step}" + ("" if self.weight == 1 else f", averaged with the base at {self.weight:g}")


def score(encoder: Encoder, validation: RetrievalSet, batch_size: int,
          prefixes: dict[str, str]) -> tuple[float, dict[str, float]]:
    """`METRIC` (NDCG@10) of `encoder` on the validation set, on average and per query (no progress display)."""
    return metric_of(validation, search_validation(encoder, validation, batch_size, prefixes))


def score_candidate(candidate: Candidate, encoder: Encoder, validation: RetrievalSet, batch_size: int,
                    prefixes: dict[str, str]) -> None:
    """Set the candidate's run (`encoder` holds its weights), its score and per-query scores: the base and every
    candidate scored with the run's `prefixes`, the prompts its export names, so that `retromae evaluate` of what a
    user keeps gives the guard's figure."""
    candidate.run = search_validation(encoder, validation, batch_size, prefixes)
    candidate.score, candidate.per_query = metric_of(validation, candidate.run)


def search_validation(encoder: Encoder, validation: RetrievalSet, batch_size: int, prefixes: dict[str, str]) -> Run:
    """The encoder's best documents per validation query (`validation_depth`), without the query itself (`scored_run`;
    no progress display); the queries and passages with `prefixes` (side → text: `finetuning.run.training_prefixes`)."""
    run = dense_search(encoder, validation.corpus_texts(), validation.queries, k=validation_depth(validation),
                       passages=TextOptions(prefixes["passage"]), questions=TextOptions(prefixes["query"]),
                       batch_size=batch_size, show_progress=False)
    return scored_run(run, validation.qrels)


def validation_depth(validation: RetrievalSet) -> int:
    """How many documents the guard retrieves per validation query: as many as a hybrid fuses, one more where a query
    is also a document under its own id (`retrieval_depth`), as `retromae evaluate --hybrid` retrieves them, so that
    it gives the guard's figures."""
    return retrieval_depth(candidate_depth(CUTOFF), validation)


def metric_of(validation: RetrievalSet, run: Run) -> tuple[float, dict[str, float]]:
    """`METRIC` of a run on the validation set, on average and per query."""
    means, queries = evaluate_run(validation.qrels, run, (CUTOFF,), per_query=True, source="the validation set")
    return means[METRIC], {query_id: scores[METRIC] for query_id, scores in queries.items()}


def systems(validation: RetrievalSet, base: Candidate, chosen: Candidate) -> dict[str, float]:
    """`METRIC` on the validation set of what a user can run next, by name (base, bm25, base+bm25, adapted,
    adapted+bm25): BM25 over the validation corpus, the base and, when a candidate was chosen, the adapted model, each
    alone and in a hybrid with BM25 (`retrieval.fusion`'s default, as `retromae index --hybrid` and `search` fuse)."""
    lexical = scored_run(bm25_search(validation.corpus_texts(), validation.queries, k=validation_depth(validation),
                                     show_progress=False, warn_empty=False), validation.qrels)
    runs = {"base": base.run, "bm25": lexical, "base+bm25": fuse(base.run, lexical, k=CUTOFF)}
    if chosen is not base:
        runs |= {"adapted": chosen.run, "adapted+bm25": fuse(chosen.run, lexical, k=CUTOFF)}
    return {name: metric_of(validation, run)[0] for name, run in runs.items()}


def measure_gain(base: dict[str, float], candidate: dict[str, float], seed: int,
                 resamples: int = BOOTSTRAP_RESAMPLES, level: float = INTERVAL_LEVEL) -> Gain:
    """The candidate's mean gain over the base and its percentile bootstrap intervals, paired by query: the queries
    resampled with replacement `resamples` times (seeded), both systems' means taken on each resample, their
    difference and their ratio − 1 (the relative interval: None when the base's mean is 0 in some resample)."""
    queries = sorted(base)
    before = np.array([base[query_id] for query_id in queries])  # (Q,)
    after = np.array([candidate[query_id] for query_id in queries])  # (Q,)
    rows = np.random.default_rng(seed).integers(0, len(queries), size=(resamples, len(queries)))
    before_means, after_means = before[rows].mean(axis=1), after[rows].mean(axis=1)  # (resamples,)
    tail = (1 - level) / 2 * 100

    def percentiles(values: np.ndarray) -> tuple[float, float]:
        low, high = np.percentile(values, [tail, 100 - tail])
        return float(low), float(high)

    defined = bool((before_means > 0).all())
    return Gain(absolute=float(after.mean() - before.mean()), interval=percentiles(after_means - before_means),
                relative=float(after.mean() / before.mean() - 1) if defined else None,
                relative_interval=percentiles(after_means / before_means - 1) if defined else None)


def decide(base: Candidate, scored: list[Candidate], seed: int) -> Candidate:
    """The candidate with the best average, with its gain measured, when the interval's lower end is above 0 (it beats
    the base beyond the queries' noise); else the base."""
    best = base
    for candidate in scored:
        if parse_key(METRIC)[0].better(candidate.score, best.score):
            best = candidate
    if best is base:
        return base
    best.gain = measure_gain(base.per_query, best.per_query, seed)
    return best if best.gain.interval[0] > 0 else base


def checkpoint_encoder(checkpoint: Path, base: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The encoder tensors of a training checkpoint, named as in `base` (the base model's state dict); the tensors the
    training does not hold (a pooler the masked LM lacks) are the base's. ModelLoadError when others are missing."""
    tensors = read_model_tensors(checkpoint / MODEL_FILE)
    state = {name: tensors.get(prefix + name) for name in base}
    missing = [name for name, tensor in state.items() if tensor is None and not name.startswith("pooler.")]
    if missing:
        raise ModelLoadError(f"{checkpoint / MODEL_FILE}: holds no encoder tensor {prefix}{missing[0]} "
                             f"({len(missing)} missing)")
    return {name: base[name] if tensor is None else tensor.to(base[name].device) for name, tensor in state.items()}


def averaged(adapted: dict[str, torch.Tensor], base: dict[str, torch.Tensor], weight: float) -> dict[str, torch.Tensor]:
    """weight·adapted + (1 − weight)·base, tensor by tensor (integer buffers such as position ids: the base's)."""
    return {name: torch.lerp(base[name].float(), adapted[name].float(), weight).to(base[name].dtype)
            if base[name].is_floating_point() else base[name] for name in base}


def candidates(steps: list[int], weights: list[float], last_only: bool) -> list[Candidate]:
    """Every checkpoint step (or the last alone) at every weight, in step order."""
    return [Candidate(step, weight) for step in (steps[-1:] if last_only else steps) for weight in weights]


def run_guard(encoder: Encoder, validation: RetrievalSet, states: dict[int, Path], prefix: str,
              weights: list[float], base: Candidate, batch_size: int, seed: int,
              prefixes: dict[str, str]) -> tuple[Candidate, list[Candidate], dict[str, torch.Tensor]]:
    """Score every candidate (`states`: training checkpoints by step, their encoder's tensors named under `prefix`)
    with `prefixes`, as the base was; returns the one exported (the base unless a candidate beats it, `decide`), all
    of them (the base first) and the exported state. `encoder` holds the base's weights on entry and on return."""
    base_state = {name: tensor.detach().clone() for name, tensor in encoder.model.state_dict().items()}
    found = candidates(list(states), weights, last_only=False)
    with progress(f"validating {len(found)} candidate{'s' if len(found) != 1 else ''}", len(found),
                  "candidate") as bar:
        for candidate in found:
            encoder.model.load_state_dict(candidate_state(states[candidate.step], base_state, prefix,
                                                          candidate.weight))
            score_candidate(candidate, encoder, validation, batch_size, prefixes)
            bar.update(1)
    chosen = decide(base, found, seed)
    for candidate in found:
        if candidate is not chosen and candidate.per_query is not None:
            candidate.gain = measure_gain(base.per_query, candidate.per_query, seed)
            candidate.run = None  # only the base's and the chosen one's runs are fused (`systems`)
    state = base_state if chosen is base else candidate_state(states[chosen.step], base_state, prefix, chosen.weight)
    encoder.model.load_state_dict(base_state)
    return chosen, [base, *found], state


def candidate_state(checkpoint: Path, base: dict[str, torch.Tensor], prefix: str,
                    weight: float) -> dict[str, torch.Tensor]:
    """A checkpoint's encoder averaged with the base at `weight`."""
    return averaged(checkpoint_encoder(checkpoint, base, prefix), base, weight)
