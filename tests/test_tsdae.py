"""The TSDAE objective: deletion noise, the next-token loss on hand-computed cases, the decoder's only path."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_bert_config

from retromae.objectives import create_objective
from retromae.objectives.tsdae import TSDAE, delete_words, next_token_labels


def test_next_token_loss_by_hand():
    # Vocabulary of 3; one row of 4 tokens [0, 1, 2, pad]: positions 0 and 1 predict tokens 1 and 2, position 2
    # predicts padding and is ignored.
    logits = torch.tensor([[[0.0, 2.0, 0.0], [1.0, 1.0, 1.0], [9.0, 9.0, 0.0]]])  # (1, 3, 3)
    input_ids = torch.tensor([[0, 1, 2, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 0]])
    first = -(2.0 - math.log(math.exp(0) + math.exp(2) + math.exp(0)))  # token 1 from [0, 2, 0]
    second = math.log(3.0)  # token 2 from uniform logits
    labels = next_token_labels(input_ids, attention_mask)
    assert labels.tolist() == [[1, 2, -100]]
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    assert loss.item() == pytest.approx((first + second) / 2, rel=1e-6)


def test_deletion_keeps_special_tokens_order_and_at_least_one_word():
    input_ids = torch.tensor([[101, 5, 6, 7, 8, 102, 0], [101, 9, 102, 0, 0, 0, 0]])
    attention_mask = (input_ids != 0).long()
    special = torch.tensor([[1, 0, 0, 0, 0, 1, 1], [1, 0, 1, 1, 1, 1, 1]], dtype=torch.bool)
    generator = torch.Generator().manual_seed(0)
    noised, mask = delete_words(input_ids, attention_mask, special, None, 0.99, generator)
    for row in range(2):
        kept = noised[row][mask[row].bool()].tolist()
        assert kept[0] == 101 and kept[-1] == 102 and len(kept) >= 3  # [CLS], one word at least, [SEP]
        assert [t for t in input_ids[row].tolist() if t in kept] == kept  # a subsequence, in order
    untouched, same_mask = delete_words(input_ids, attention_mask, special, None, 0.0, generator)
    assert torch.equal(untouched, input_ids[:, :6]) and torch.equal(same_mask, attention_mask[:, :6])  # trimmed


def test_deletion_removes_whole_words():
    input_ids = torch.tensor([[101, 5, 6, 7, 8, 9, 102]])
    special = torch.tensor([[1, 0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    starts = torch.tensor([[0, 1, 0, 1, 0, 0, 0]], dtype=torch.bool)  # words [5 6] and [7 8 9]
    for seed in range(20):
        noised, mask = delete_words(input_ids, torch.ones_like(input_ids), special, starts, 0.6,
                                    torch.Generator().manual_seed(seed))
        kept = noised[0][mask[0].bool()].tolist()[1:-1]
        assert kept in ([5, 6], [7, 8, 9], [5, 6, 7, 8, 9])


def test_the_decoder_reads_the_input_only_through_the_sentence_vector(tiny_tokenizer):
    from transformers import BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(tiny_bert_config(len(tiny_tokenizer)))
    objective = create_objective("tsdae", model, tiny_tokenizer).eval()
    assert isinstance(objective, TSDAE) and objective.pooling == "cls"
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    mask = torch.ones_like(ids)
    sentence = torch.randn(1, 32)
    layer = objective.decoder[0]
    hidden = torch.randn(1, 5, 32)
    changed = layer(hidden, sentence + 1.0, mask)
    assert not torch.allclose(layer(hidden, sentence, mask), changed)  # the vector reaches every position
    # causal: position 2's output ignores positions 3 and 4
    later = hidden.clone()
    later[:, 3:] += 5.0
    torch.testing.assert_close(layer(hidden, sentence, mask)[:, :3], layer(later, sentence, mask)[:, :3])
    batch = {"input_ids": ids, "attention_mask": mask, "special_tokens_mask": torch.tensor([[1, 0, 0, 0, 1]]).bool(),
             "word_starts": torch.tensor([[0, 1, 1, 1, 0]]).bool()}
    losses = objective.train()(batch, torch.Generator().manual_seed(1))
    assert torch.isfinite(losses["loss"]) and losses["loss"].requires_grad
    losses["loss"].backward()
    assert model.bert.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0  # the encoder learns
