"""Pre-training retrieval-oriented encoders (RetroMAE and the field's other methods), as `retromae.finetuning` holds
fine-tuning.

Submodules: `config` (`PretrainConfig`, every option of `retromae pretrain`, and `InitModelConfig`, import-light),
`run` (`pretrain`: data, objective, training loop, export; `retromae.pretrain(...)` calls it), `scratch` (a model
and tokenizer from scratch, `retromae init-model`), `hf_trainer` (an objective under a transformers `Trainer`). The
objectives and their masks are `retromae.objectives`; the backbone they train is `retromae.backbones` (loaded by
`retromae.models.masked_lm`); the training loop is `retromae.training`.
"""
