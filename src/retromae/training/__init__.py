"""The one training loop, shared by pre-training, fine-tuning, adaptation and the reranker, and what it stands on.

Owns: `loop` (`Trainer`: one step after another, logging, checkpointing, stopping a diverged run), `setup` (the start
of every training command, `start_run` and `claim_output`; the Accelerator, precision and distribution; the model
made ready to train), `optimizer` (AdamW and the schedule), `checkpoints` (saving, listing, resuming),
`checkpoint_state` (what a checkpoint holds on disk, without pickle), `metrics_log` (`metrics.jsonl` and the record
of a window of steps), `divergence` (the words and the error of a run whose loss or weights turned NaN), `trackers`
(TensorBoard, W&B, MLflow), `config` (`TrainingConfig`, `HeadTrainingConfig`: torch-free). Does not own the losses
(`retromae.losses`), any objective (`retromae.objectives`), model loading (`retromae.models`) or a command's data.

The names a loop of one's own needs are here too (`from retromae.training import Trainer, TrainingConfig`), each
imported on first use so that importing the package (as `--help` does, for `training.config`) loads no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "retromae.training.loop": ("Trainer", "TrainState", "mask_generator"),
    "retromae.training.config": ("TrainingConfig", "HeadTrainingConfig"),
    "retromae.losses": ("VOCABULARY_LOSSES",),
    "retromae.training.setup": ("start_run", "claim_output", "make_accelerator", "seed_everything", "whole_model",
                                "shards_parameters", "check_unsharded", "use_tensor_cores", "AUTOCAST_DTYPES",
                                "TRAINING_OUTPUTS"),
    "retromae.runtime.precision": ("resolve_mixed_precision", "CPU_FP16"),
    "retromae.training.checkpoints": ("checkpoints_by_step", "latest_checkpoint", "checkpoint_identity",
                                      "prune_checkpoints", "CHECKPOINT_PATTERN"),
    "retromae.training.optimizer": ("body_parameter_ids", "linear_schedule", "follow_schedule"),
    "retromae.training.metrics_log": ("MetricsLog",),
    "retromae.data.batch_sampler": ("ResumableBatchSampler",),
}
_HOMES = {name: module for module, names in _NAMES.items() for name in names}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'retromae.training' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
