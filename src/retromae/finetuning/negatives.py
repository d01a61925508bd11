"""Hard negatives during fine-tuning: mined once before training (BM25 or the starting model) and, ANCE style
(Xiong et al., 2021), re-mined with the model being trained every N steps.

Owns `Miner` (rank the training set's passages for its queries with BM25 or the current towers, choose
negatives, store them in the examples: process 0 mines, the others receive its result), `NegativeRefresher`
(the loop's `on_step` hook: re-encode the passages with the live towers, re-mine, swap the negatives the batch
sampler draws from) and the `OUTPUT/negatives/step-N.json` files that let a resumed run continue with the
negatives the interrupted run had at that step. Does not own ranking itself (`retrieval.mining`), batching or
the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from accelerate import Accelerator

from retromae.data.training_groups import TrainingSet
from retromae.models.encoder import Encoder
from retromae.retrieval.mining import MiningOptions, bm25_rankings, choose_negatives, dense_rankings
from retromae.runtime.broadcast import rows_from_main
from retromae.runtime.errors import DataError
from retromae.runtime.io import write_text_atomic
from retromae.runtime.lines import read_json_file

NEGATIVES_DIR = "negatives"


def negatives_path(output: Path, step: int) -> Path:
    return Path(output) / NEGATIVES_DIR / f"step-{step:07d}.json"


def save_negatives(data: TrainingSet, output: Path, step: int) -> None:
    """Every example's negative rows at `step`, atomically."""
    write_text_atomic(negatives_path(output, step), json.dumps([e.negatives for e in data.examples]) + "\n")


def load_latest_negatives(data: TrainingSet, output: Path, step: int) -> int | None:
    """Restore the negatives saved at the latest step ≤ `step`; returns that step, or None when there is none."""
    saved = sorted((int(p.stem.split("-")[1]), p) for p in (Path(output) / NEGATIVES_DIR).glob("step-*.json"))
    usable = [(found, path) for found, path in saved if found <= step]
    if not usable:
        return None
    found, path = usable[-1]
    saved_negatives = read_json_file(path, list)
    if not _fits(saved_negatives, data):
        raise DataError(f"{path}: not the mined negatives of this training set ({len(data.examples)} lists of "
                        f"passage rows below {len(data.texts)}); delete it to mine them again")
    for example, negatives in zip(data.examples, saved_negatives, strict=True):
        example.negatives = negatives
    return found


def _fits(saved_negatives: list, data: TrainingSet) -> bool:
    """Whether a saved negatives file holds one list of passage rows of `data` per training example."""
    rows = range(len(data.texts))
    return len(saved_negatives) == len(data.examples) and all(
        isinstance(negatives, list) and all(isinstance(row, int) and row in rows for row in negatives)
        for negatives in saved_negatives)


@dataclass
class Miner:
    """Mines negatives for a training set with BM25 or with dense towers (encoders wrapping live models)."""

    data: TrainingSet
    options: MiningOptions
    encoder: Encoder | None = None
    query_encoder: Encoder | None = None
    query_max_length: int | None = None
    passage_max_length: int | None = None
    batch_size: int = 64
    prefixes: dict[str, str | None] = field(default_factory=dict)  # side → the prefix given (`dense_rankings`'s;
    # absent or None: the model's prompt)

    def rankings(self, method: str, show_progress: bool = True) -> list[list[int]]:
        """Each example's passage rows, best first, by "bm25" or by the dense towers ("model")."""
        if method == "bm25":
            return bm25_rankings(self.data, self.options.rank_end, show_progress)
        return dense_rankings(self.encoder, self.data, self.options.rank_end, self.batch_size,
                              self.query_max_length, self.passage_max_length, show_progress,
                              query_encoder=self.query_encoder, query_prefix=self.prefixes.get("query"),
                              passage_prefix=self.prefixes.get("passage"))

    def mine(self, method: str, accelerator: Accelerator, seed: int, show_progress: bool = True) -> None:
        """Replace every example's negatives with freshly mined ones (mined on process 0, sent to the others), the
        rank window first checked against the passages on every process (`MiningOptions.check_window`)."""
        self.options.check_window(len(self.data.texts), self.data.source)
        negatives = None
        if accelerator.is_main_process:
            negatives = choose_negatives(self.data, self.rankings(method, show_progress), self.options, seed)
        negatives = rows_from_main(negatives, len(self.data.examples), self.options.negatives_per_query, accelerator)
        for example, rows in zip(self.data.examples, negatives, strict=True):
            example.negatives = rows


class NegativeRefresher:
    """`Trainer` hook: every `every` steps (not after the last), re-mine negatives with the towers being trained."""

    def __init__(self, miner: Miner, every: int, seed: int) -> None:
        self.miner, self.every, self.seed = miner, every, seed

    def __call__(self, trainer) -> None:
        step = trainer.state.step
        if step % self.every or step >= trainer.config.max_steps:
            return
        # Quietly: bars of their own would break the training bar's line.
        self.miner.mine("model", trainer.accelerator, self.seed + step, show_progress=False)
        if trainer.accelerator.is_main_process:
            save_negatives(self.miner.data, trainer.output, step)
        trainer.accelerator.wait_for_everyone()
