"""The losses every trainer takes, in a room of their own: what trains with a loss imports it from here, not from the
training loop.

Owns: `losses` (InfoNCE, its cross-device gathering with gradients, distillation's KL and margin-MSE, listwise KL),
`fused_loss` (the losses on the vocabulary fused with its projection, a chunk of rows at a time: `VocabularyHead`),
`vocabulary_choice` (which kernel of `--vocabulary-loss auto` is fastest on this CPU, measured and cached) and the
names of those kernels (`VOCABULARY_LOSSES`, here so that the options offering them import no torch). Does not own
the loop that minimises them (`retromae.training`), the objectives that choose them (`retromae.objectives`) or the
models they train (`retromae.models`).
"""

from __future__ import annotations

# auto: unfused on CUDA, measured on the CPU (`retromae.losses.vocabulary_choice`), else chunked (`resolved_kind`);
# chunked-torch: chunked on PyTorch's own products; unfused: the head's full logits, then the loss
VOCABULARY_LOSSES = ("auto", "chunked", "chunked-torch", "liger", "unfused")
