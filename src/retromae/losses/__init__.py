"""The losses every trainer takes, in a room of their own: what trains with a loss imports it from here, not from the
training loop.

Owns: `losses` (InfoNCE, its cross-device gathering with gradients, distillation's KL and margin-MSE, listwise KL),
`fused_loss` (the losses on the vocabulary fused with its projection, a chunk of rows at a time: `VocabularyHead`),
`vocabulary_choice` (which kernel of `--vocabulary-loss auto` is fastest on this CPU, measured and cached) and the
names of those kernels (`VOCABULARY_LOSSES`, and `liger_installed`, here so that the options offering them import no
torch). Does not own
the loop that minimises them (`retromae.training`), the objectives that choose them (`retromae.objectives`) or the
models they train (`retromae.models`).

The losses are offered here too (`from retromae.losses import info_nce`), each imported on first use, so that
importing the package (as the options do, for `VOCABULARY_LOSSES`) loads no torch.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

_NAMES = {
    "retromae.losses.losses": ("info_nce", "cross_device_info_nce", "gather_with_grad", "gathered_positive_index",
                               "distillation_kl", "listwise_kl", "margin_mse"),
    "retromae.losses.fused_loss": ("VocabularyHead",),
}
_HOMES = {name: module for module, names in _NAMES.items() for name in names}


def liger_installed() -> bool:
    """Whether Liger Kernel (`--vocabulary-loss liger`) can be imported (found without importing it)."""
    return importlib.util.find_spec("liger_kernel") is not None

# auto: unfused on CUDA, measured on the CPU (`retromae.losses.vocabulary_choice`), else chunked (`resolved_kind`);
# chunked-torch: chunked on PyTorch's own products; unfused: the head's full logits, then the loss
VOCABULARY_LOSSES = ("auto", "chunked", "chunked-torch", "liger", "unfused")


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'retromae.losses' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
