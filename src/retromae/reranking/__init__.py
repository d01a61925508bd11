"""Cross-encoder rerankers, the teachers of distillation: `retromae train-reranker` and `retromae score`.

Owns: `config` (`RerankerConfig`, `ScoreConfig`, torch-free) and `run` (training a cross-encoder on the shared loop,
`CrossEncoder`, and scoring a training file's pairs for `finetune --distill`). Does not own the loop
(`retromae.training`) or mining negatives (`retromae.finetuning.negatives`, `retromae.retrieval.mining`).
"""
