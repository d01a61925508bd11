"""The guard of `retromae adapt`: score the base and every candidate on the validation set, pick the best.

Owns: the candidates (the last checkpoint of the training stage, or each, at each weight of its average with the
base: WiSE-FT's θ = w·θ_adapted + (1 − w)·θ_base), reading a checkpoint's encoder out of its training state, and
scoring an encoder state (the primary metric of the metric registry, NDCG@10, of a dense search of the validation
queries, with the base's pooling and similarity). A candidate wins only by beating the base strictly; otherwise
the base is the result, unchanged. Does not own the training (`retromae.pretraining.run`), search or metrics
(`retromae.retrieval`, `retromae.evaluation.metric_registry`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from retromae.checkpoint_state import MODEL_FILE, read_model_tensors
from retromae.console import progress
from retromae.data.retrieval_sets import RetrievalSet
from retromae.encoder import Encoder
from retromae.errors import ModelLoadError
from retromae.evaluation.metric_registry import parse_key, primary_key
from retromae.evaluation.metrics import evaluate_run
from retromae.retrieval.search import TextOptions, dense_search
from retromae.train import checkpoints_by_step

METRIC = primary_key()  # ndcg@10


@dataclass
class Candidate:
    """One encoder the guard scores: the base (step 0), or a checkpoint's encoder averaged with the base at `weight`."""

    step: int
    weight: float
    score: float | None = None

    @property
    def name(self) -> str:
        if self.step == 0:
            return "base"
        return f"step {self.step}" + ("" if self.weight == 1 else f", averaged with the base at {self.weight:g}")


def score(encoder: Encoder, validation: RetrievalSet, batch_size: int) -> float:
    """`METRIC` (NDCG@10) of `encoder` on the validation set (no progress display of its own)."""
    k = parse_key(METRIC)[1]
    run = dense_search(encoder, validation.corpus_texts(), validation.queries, k=k, passages=TextOptions(),
                       questions=TextOptions(), batch_size=batch_size, show_progress=False)
    return evaluate_run(validation.qrels, run, (k,))[METRIC]


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


def run_guard(encoder: Encoder, validation: RetrievalSet, training: Path, prefix: str, weights: list[float],
              last_only: bool, base_score: float,
              batch_size: int) -> tuple[Candidate, list[Candidate], dict[str, torch.Tensor]]:
    """Score every candidate; returns the winner (the base unless one beats it), all of them, and the winner's
    state. `encoder` holds the base's weights on entry and on return."""
    base = {name: tensor.detach().clone() for name, tensor in encoder.model.state_dict().items()}
    base_candidate = Candidate(0, 1.0, base_score)
    best, best_state = base_candidate, base
    paths = dict(checkpoints_by_step(training))
    found = candidates(list(paths), weights, last_only)
    with progress(f"validating {len(found)} candidate{'s' if len(found) != 1 else ''}", len(found),
                  "candidate") as bar:
        for candidate in found:
            state = averaged(checkpoint_encoder(paths[candidate.step], base, prefix), base, candidate.weight)
            encoder.model.load_state_dict(state)
            candidate.score = score(encoder, validation, batch_size)
            if parse_key(METRIC)[0].better(candidate.score, best.score):
                best, best_state = candidate, state
            bar.update(1)
    encoder.model.load_state_dict(base)
    return best, [base_candidate, *found], best_state
