"""Workflows that chain whole commands: `retromae quickstart`, the papers' comparison on real text, offline.

Owns: `config` (`QuickstartConfig` and its budgets, torch-free) and `quickstart` (tokenizer → small model →
pre-training with MLM and RetroMAE → fine-tuning → evaluation against BM25 → results table and plot). Does not own
any of the stages it runs (`retromae.pretraining`, `retromae.finetuning`, `retromae.evaluation`).
"""
