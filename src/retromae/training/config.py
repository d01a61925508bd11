"""The options of the training loop, declared apart from the loop so that parsing them imports no torch.

Owns: `TrainingConfig` (shared by every command that trains), `HeadTrainingConfig` (commands whose model puts
new heads on a pre-trained body), offering the kernels of the losses on the vocabulary (`retromae.losses`
`VOCABULARY_LOSSES`). `retromae.training.loop` runs the configs. Does not own the loop or the losses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from retromae.runtime.options import FRACTION, NON_NEGATIVE, POSITIVE, SEED, STEPS, Options, option, require
from retromae.training.trackers import TRACKERS, check_installed


@dataclass(kw_only=True)
class TrainingConfig(Options):
    """Options of the training loop, shared by every command that trains."""

    OPTION_GROUP = "training loop"

    output: str = option(help="output directory (checkpoints, metrics.jsonl, exported models)")
    max_steps: int = option(1000, "number of optimiser steps", STEPS)
    batch_size: int = option(16, "examples per device per micro-batch", POSITIVE)
    gradient_accumulation_steps: int = option(1, "micro-batches per optimiser step", POSITIVE)
    learning_rate: float = option(1e-4, "peak learning rate of AdamW", POSITIVE)
    weight_decay: float = option(0.01, "AdamW weight decay (not applied to biases and LayerNorm)", NON_NEGATIVE)
    warmup_ratio: float = option(0.1, "share of max_steps spent warming the learning rate up linearly", FRACTION)
    max_grad_norm: float = option(1.0, "gradient clipping norm (0 disables clipping)", NON_NEGATIVE)
    mixed_precision: str = option("auto", "mixed precision; auto: bf16 on a CUDA GPU that supports it (with TF32 "
                                          "matmuls) and on a CPU with AMX ($RETROMAE_CPU_BF16=0: fp32), fp32 "
                                          "elsewhere", choices=("auto", "no", "fp16", "bf16"))
    gradient_checkpointing: bool = option(False, "recompute encoder activations in the backward pass to save memory")
    compile: bool = option(False, "compile the model's forward with torch.compile (faster steps on GPUs after a "
                                  "warm-up of a minute or so; needs a C++ compiler on CPU)")
    group_by_length: bool = option(True, "read examples in batches of similar length (seeded, resumable, the same "
                                         "examples each epoch), so that batches pay less padding; pre-training "
                                         "blocks only")
    distributed_timeout: int = option(120, "minutes a process waits for the others before the run is declared "
                                           "hung (rank 0 alone probes, mines and refreshes negatives meanwhile; "
                                           "NCCL alone waits 10)", POSITIVE)
    seed: int = option(42, "random seed (data order, masks, dropout, decoder initialisation)", SEED)
    log_every: int = option(10, "log metrics every N steps", POSITIVE)
    save_every: int = option(500, "write a checkpoint every N steps and at the end (0: none at all; a killed run then "
                                  "starts over and a finished one cannot be continued)", NON_NEGATIVE)
    keep_checkpoints: int = option(2, "how many recent checkpoints to keep", POSITIVE)
    resume: bool = option(False, "continue the run in --output from its latest checkpoint (the options that define "
                                 "the run must be the same; --max-steps may grow)")
    overwrite: bool = option(False, "replace the outputs of another run in --output (other files there are kept)")
    num_workers: int | None = option(None, "data loader worker processes (default: 2 on CUDA, so that batches are "
                                           "collated while the GPU works; 0 on CPU, where workers would take cores "
                                           "from the step)", NON_NEGATIVE)
    report_to: list[str] = option([], "also report metrics.jsonl's scalars to these experiment trackers (through "
                                      "Accelerate; tensorboard writes OUTPUT/tensorboard/); each needs its package",
                                  choices=tuple(TRACKERS))
    # Options only where new heads sit on a pre-trained body (`HeadTrainingConfig`); elsewhere all trains as one.
    head_learning_rate: ClassVar[float | None] = None
    freeze_encoder_steps: ClassVar[int] = 0

    def __post_init__(self) -> None:
        # Each option's type and domain are checked before this (`retromae.runtime.options.Options`).
        check_installed(self.report_to)

    @property
    def separate_heads(self) -> bool:
        """Whether the heads follow their own learning rate or schedule rather than the encoder's."""
        return self.head_learning_rate is not None or self.freeze_encoder_steps > 0


@dataclass(kw_only=True)
class HeadTrainingConfig(TrainingConfig):
    """Options of commands whose model puts new heads (MLM head, decoder, classifier) on a pre-trained body."""

    head_learning_rate: float | None = option(None, "peak learning rate of the parameters outside the encoder body "
                                                    "(MLM head, decoder, classifier); default: --learning-rate",
                                                    POSITIVE)
    freeze_encoder_steps: int = option(0, "train only those heads for the first N steps (the encoder's learning "
                                          "rate is 0 and its gradients dropped), then everything, the encoder with "
                                          "its own warm-up over the remaining steps", NON_NEGATIVE)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.freeze_encoder_steps < self.max_steps, "freeze_encoder_steps",
                f"must lie in [0, --max-steps) (max_steps is {self.max_steps})")
