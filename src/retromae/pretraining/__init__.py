"""Pre-training retrieval-oriented encoders (RetroMAE and the field's other methods), as `retromae.finetune` holds
fine-tuning.

Submodules: `config` (`PretrainConfig`, every option of `retromae pretrain`, import-light), `run` (`pretrain`: data,
objective, training loop, export), `masking` (the encoder and decoder masks), `scratch` (a model and tokenizer
from scratch, `retromae init-model`), `hf_trainer` (an objective under a transformers `Trainer`). The objectives
are `retromae.objectives`; the backbone they train is `retromae.backbones`; the training loop is `retromae.train`.
`retromae.pretrain(config)` is `run.pretrain(config)` (`run` is a `retromae.callable_module.CallableModule`).
"""
