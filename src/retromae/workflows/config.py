"""The options and budgets of `retromae quickstart`, declared apart from the pipeline so that parsing them imports
no torch.

Owns `Budget` (sizes, steps and the seconds each stage is expected to take), the `cpu` and `cuda` presets, choosing
a preset for a device, and `QuickstartConfig` (every option; sizes left unset come from the preset). Does not own
the pipeline (`retromae.workflows.quickstart`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from retromae.backbones.families import architecture_names, tokenizer_kinds_help
from retromae.data.held_out import HeldOut, Queries
from retromae.runtime.options import POSITIVE, SEED, STEPS, at_least, option, require
from retromae.runtime.run_folder import OutputOptions


@dataclasses.dataclass(frozen=True)
class Budget:
    """Sizes and steps of one quickstart run, with the seconds its stages are expected to take."""

    vocab_size: int
    hidden_size: int
    layers: int
    max_length: int
    pretrain_steps: int
    pretrain_batch_size: int
    learning_rate: float
    finetune_epochs: float
    finetune_batch_size: int
    mixed_precision: str
    seconds_per_step: dict[str, float]  # per pre-training objective; with the next two, the expected time left
    seconds_per_finetune: float
    seconds_per_evaluation: float


PRESETS = {
    # Chosen by measurement on two idle cores (docs/RESULTS.md, section 0): by about 1,000 steps RetroMAE's [CLS]
    # leaves the unigram plateau (its zero-shot probe rises while MLM's stays at chance), and 1,200 steps give it a
    # fine-tuned NDCG@10 gap over MLM and no pre-training well beyond the seeds' spread. Paces from a clean-clone
    # run on the idle machine (fused AdamW, length-grouped batches): MLM 0.046 s and RetroMAE about 0.09 s a step;
    # 3 fine-tuning epochs 13-19 s per variant; about four minutes in all.
    "cpu": Budget(vocab_size=2000, hidden_size=128, layers=2, max_length=64, pretrain_steps=1200,
                  pretrain_batch_size=32, learning_rate=2e-3, finetune_epochs=3.0, finetune_batch_size=32,
                  mixed_precision="no", seconds_per_step={"mlm": 0.05, "retromae": 0.09}, seconds_per_finetune=20.0,
                  seconds_per_evaluation=5.0),
    # The H100 measurement's settings (../shared/measurements/h100-2026-11-22: 4 x 256, 128 x 128 tokens, 1e-3,
    # bf16) at over 100 passes over the standard-library corpus (~0.26M tokens) instead of 6.5 over 7.6M. Paces
    # from its first run, on one H100 (docs/performance.md): MLM 0.025 s and RetroMAE 0.036 s a step, 19-33 s of
    # fine-tuning per variant; 3.6 minutes in all.
    "cuda": Budget(vocab_size=8000, hidden_size=256, layers=4, max_length=128, pretrain_steps=2000,
                   pretrain_batch_size=128, learning_rate=1e-3, finetune_epochs=4.0, finetune_batch_size=32,
                   mixed_precision="bf16", seconds_per_step={"mlm": 0.025, "retromae": 0.036},
                   seconds_per_finetune=25.0, seconds_per_evaluation=5.0),
}
OVERRIDABLE = ("vocab_size", "hidden_size", "layers", "max_length", "pretrain_steps", "pretrain_batch_size",
               "learning_rate", "finetune_epochs", "finetune_batch_size")


def choose_preset(device: str) -> str:
    """The budget preset for a device string ('cuda', 'cuda:1', 'cpu', 'mps', ...): cuda for CUDA, else cpu."""
    return "cuda" if device.split(":")[0] == "cuda" else "cpu"


@dataclasses.dataclass(kw_only=True)
class QuickstartConfig(OutputOptions):
    """Options of `retromae quickstart`; sizes left unset come from the preset."""
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"data": "retrieval set", "corpus": "documents"}

    # the test queries it reports, never among the train ones it fine-tunes on (`data.held_out`)
    HELD_OUT: ClassVar[tuple[HeldOut, ...]] = (
        HeldOut(Queries("data", "test", fixed=True), Queries("data", "train", fixed=True), "the test queries"),)
    output: str = option("runs/quickstart", "output folder")
    data: str | None = option(None, "a BEIR folder with qrels/train.tsv and qrels/test.tsv "
                                    "(default: the Python standard library's docstrings, built offline)", reads="path")
    corpus: list[str] | None = option(None, "pre-training corpus files (default: the retrieval corpus itself)",
                                      reads="path")
    preset: str | None = option(None, "budget: cpu (about four minutes on 2 cores) or cuda (about four minutes on "
                                      "one H100); default: cuda when a CUDA GPU is present", choices=tuple(PRESETS))
    architecture: str = option("bert", "family of the small encoder built from scratch, with its kind of tokenizer "
                                       f"({tokenizer_kinds_help()})", choices=architecture_names)
    vocab_size: int | None = option(None, "vocabulary trained on the corpus (cpu preset: 2000)", at_least(100))
    hidden_size: int | None = option(None, "hidden size of the small encoder (cpu preset: 128)", POSITIVE)
    layers: int | None = option(None, "transformer layers of the encoder (cpu preset: 2)", POSITIVE)
    max_length: int | None = option(None, "tokens per pre-training block (cpu preset: 64)", at_least(8))
    pretrain_steps: int | None = option(None, "pre-training steps of each objective (cpu preset: 1200)", STEPS)
    pretrain_batch_size: int | None = option(None, "pre-training blocks per step (cpu preset: 32)", POSITIVE)
    learning_rate: float | None = option(None, "pre-training peak learning rate (cpu preset: 2e-3)", POSITIVE)
    finetune_epochs: float | None = option(None, "fine-tuning epochs over the train queries (cpu preset: 3)", POSITIVE)
    finetune_batch_size: int | None = option(None, "queries per fine-tuning step, in-batch negatives (cpu: 32)",
                                             POSITIVE)
    seed: int = option(42, "random seed (initialisation, data order, masks)", SEED)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.hidden_size is None or self.hidden_size % 64 == 0, "hidden_size",
                "must be a multiple of 64 (heads of 64)")

    def budget(self, device: str) -> tuple[str, Budget]:
        """The preset's name and its budget with this config's overrides applied."""
        name = self.preset or choose_preset(device)
        overrides = {key: getattr(self, key) for key in OVERRIDABLE if getattr(self, key) is not None}
        return name, dataclasses.replace(PRESETS[name], **overrides)
