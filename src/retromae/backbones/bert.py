"""BERT and the encoders built like it (MiniLM, BGE, E5, ...): an absolute position table, WordPiece (`##` marks a
word's continuation), one MLM head module (`cls`) beside the base model."""

from __future__ import annotations

from transformers import BertConfig, PretrainedConfig

from retromae.backbones.base import BackboneAdapter


class BertAdapter(BackboneAdapter):
    positions = "absolute"

    def scratch_config(self, architecture: str, vocab_size: int, special_ids: dict[str, int], *, hidden_size: int,
                       layers: int, max_positions: int) -> PretrainedConfig:
        return BertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                          num_attention_heads=hidden_size // 64, intermediate_size=4 * hidden_size,
                          max_position_embeddings=max_positions, pad_token_id=special_ids["pad"])
