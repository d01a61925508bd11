"""The one training loop, shared by pre-training, fine-tuning, adaptation and the reranker, and what it stands on.

Owns: `loop` (`Trainer`: one step after another, logging, saving, resuming), `config` (`TrainingConfig`,
`HeadTrainingConfig`: the loop's options, torch-free), `checkpoint_state` (what a checkpoint holds on disk, without
pickle), `trackers` (TensorBoard, W&B, MLflow), `losses` (InfoNCE and cross-device gathering), `fused_loss` and
`vocabulary_choice` (the losses on the vocabulary, fused with its projection, and the fastest kernel on this CPU).
Does not own any objective (`retromae.objectives`), model loading (`retromae.models`) or a command's data.
"""
