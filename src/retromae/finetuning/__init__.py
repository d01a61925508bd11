"""Fine-tuning dense retrievers: DPR-style (in-batch + BM25 negatives), ANCE-style (negatives re-mined with the
model being trained), cross-device negatives, gradient caching, and distillation from a cross-encoder.

Submodules: `batches` (group sampler, collator), `grad_cache`, `model` (dual encoder and its losses),
`negatives` (mining before and during training), `memory` and `plan` (the run's batch and memory plan), `config`
(`FinetuneConfig`, import-light), `run` (`finetune`, which `retromae.finetune(...)` calls). The training loop is
`retromae.training`; the losses are `retromae.losses.losses`.
"""
