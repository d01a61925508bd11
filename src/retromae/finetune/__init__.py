"""Fine-tuning dense retrievers: DPR-style (in-batch + BM25 negatives), ANCE-style (negatives re-mined with the
model being trained), cross-device negatives, gradient caching, and distillation from a cross-encoder.

Submodules: `batches` (group sampler, collator), `grad_cache`, `model` (dual encoder and its losses),
`negatives` (mining before and during training), `run` (`FinetuneConfig`, `finetune`). The training loop is
`retromae.train`; the losses are `retromae.losses`. The package can be called: `retromae.finetune(config)` is
`run.finetune(config)` (`retromae.callable_module.CallableModule`).
"""

import sys

from retromae.callable_module import CallableModule

__entry__ = "retromae.finetune.run:finetune"
sys.modules[__name__].__class__ = CallableModule
