"""RoBERTa and XLM-RoBERTa (the base of BGE-M3): an absolute position table numbered from the padding index + 1,
so two of its rows are never read; RoBERTa's byte-level BPE marks a word start with `Ġ`, XLM-R's SentencePiece
Unigram with `▁`; one MLM head module (`lm_head`) beside the base model."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel, RobertaConfig, XLMRobertaConfig

from retromae.backbones.base import BackboneAdapter


class RobertaAdapter(BackboneAdapter):
    positions = "absolute"

    def vocabulary_projection(self, model: PreTrainedModel) -> tuple[nn.Module, nn.Linear]:
        head = self.mlm_head(model)
        return HeadTransform(head), head.decoder

    def max_length(self, config: PretrainedConfig) -> int | None:
        return config.max_position_embeddings - self._offset(config)

    def absolute_positions(self, model: PreTrainedModel, length: int, device: torch.device) -> torch.Tensor:
        table = model.base_model.embeddings.position_embeddings
        offset = self._offset(model.config)
        return table(torch.arange(offset, offset + length, device=device))

    @staticmethod
    def _offset(config: PretrainedConfig) -> int:
        """Position ids start after the padding index."""
        return (config.pad_token_id or 0) + 1

    def scratch_config(self, architecture: str, vocab_size: int, special_ids: dict[str, int], *, hidden_size: int,
                       layers: int, max_positions: int) -> PretrainedConfig:
        config_class = XLMRobertaConfig if architecture == "xlm-roberta" else RobertaConfig
        return config_class(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                            num_attention_heads=hidden_size // 64, intermediate_size=4 * hidden_size,
                            max_position_embeddings=max_positions + special_ids["pad"] + 1, type_vocab_size=1,
                            pad_token_id=special_ids["pad"], bos_token_id=special_ids["cls"],
                            eos_token_id=special_ids["sep"])


class HeadTransform(nn.Module):
    """What `RobertaLMHead` does before its projection onto the vocabulary: dense, exact GELU, LayerNorm. It holds
    the head's own layers (no weights of its own), since the head's forward runs them inline."""

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.head.layer_norm(F.gelu(self.head.dense(features)))
