"""RetroMAE's bottleneck on the caller's pooling: the masked mean (its direction at length √D for a normalised base)
conditions the decoder and the contrastive term; `retromae pretrain` keeps the [CLS] state, with the same numbers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_bert_config
from test_objectives import build, generator, make_batch
from transformers import BertForMaskedLM

from retromae.models import masked_lm as backbone
from retromae.objectives import create_objective
from retromae.objectives.contrastive import contrastive_loss

HIDDEN = 32  # tiny_bert_config's hidden size


def pooled_objective(name: str, tokenizer, normalize: bool = True, **options):
    torch.manual_seed(0)
    model = BertForMaskedLM(tiny_bert_config(len(tokenizer)))
    return create_objective(name, model, tokenizer, pooling="mean", normalize=normalize, **options).eval()


def by_hand_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of each row's states at its real positions, one row at a time."""
    return torch.stack([hidden[row, mask[row].bool()].mean(dim=0) for row in range(hidden.shape[0])])


def spy(objective, monkeypatch) -> dict[str, torch.Tensor]:
    """Record the encoder's final states and the h_X the decoder is given during one forward pass."""
    seen: dict[str, torch.Tensor] = {}
    encode, decode = backbone.hidden_states, objective.decoder_loss

    def hidden_states(model, input_ids, attention_mask):
        seen["hidden"] = encode(model, input_ids, attention_mask)
        return seen["hidden"]

    def decoder_loss(batch, sentence, generator):
        seen["sentence"] = sentence
        return decode(batch, sentence, generator)

    monkeypatch.setattr(backbone, "hidden_states", hidden_states)
    monkeypatch.setattr(objective, "decoder_loss", decoder_loss)
    return seen


def test_the_pooled_bottleneck_is_the_masked_mean_of_real_positions(tiny_tokenizer):
    objective = pooled_objective("retromae", tiny_tokenizer)
    assert (objective.pooling, objective.normalize) == ("mean", True)  # what the exports declare
    hidden = torch.randn(3, 6, HIDDEN, generator=generator())
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 3 + [0] * 3])
    embeddings, sentence = objective.bottleneck(hidden, mask)
    mean = by_hand_mean(hidden, mask)
    torch.testing.assert_close(embeddings, mean)
    torch.testing.assert_close(sentence[:, 0], F.normalize(mean, dim=-1) * math.sqrt(HIDDEN))  # direction, at √D
    torch.testing.assert_close(sentence[:, 0].norm(dim=-1), torch.full((3,), math.sqrt(HIDDEN)))

    padded = hidden.clone()
    padded[1, 4:] += 100.0  # padding states: not part of the sentence
    torch.testing.assert_close(objective.bottleneck(padded, mask)[1], sentence, rtol=0, atol=0)
    moved = hidden.clone()
    moved[:, 0] += 6.0  # [CLS] alone moves the mean by 6 / (real tokens), not by 6 as [CLS] pooling would
    shift = objective.bottleneck(moved, mask)[0] - embeddings
    torch.testing.assert_close(shift, 6.0 / mask.sum(dim=1, keepdim=True).float().expand(-1, HIDDEN))
    middle = hidden.clone()
    middle[:, 2] += 6.0  # a token other than [CLS] moves it as much
    torch.testing.assert_close(objective.bottleneck(middle, mask)[0] - embeddings, shift)


def test_an_unnormalised_base_gives_the_decoder_its_pooled_vector_as_it_is(tiny_tokenizer):
    objective = pooled_objective("retromae", tiny_tokenizer, normalize=False)
    hidden = torch.randn(2, 5, HIDDEN, generator=generator())
    mask = torch.tensor([[1] * 5, [1] * 2 + [0] * 3])
    embeddings, sentence = objective.bottleneck(hidden, mask)
    torch.testing.assert_close(sentence[:, 0], by_hand_mean(hidden, mask))
    torch.testing.assert_close(embeddings, sentence[:, 0])


@pytest.mark.parametrize("name,options", [
    ("retromae", {"decoding": "enhanced"}),
    ("retromae", {"decoding": "basic"}),
    ("retromae+contrastive", {}),
    ("dupmae", {}),
])
def test_the_decoder_is_conditioned_on_the_pooled_vector_not_cls(tiny_tokenizer, monkeypatch, name, options):
    objective = pooled_objective(name, tiny_tokenizer, **options)
    seen = spy(objective, monkeypatch)
    batch = make_batch(tiny_tokenizer)  # rows of different lengths: padding in all but the longest
    assert not batch["attention_mask"].all()
    losses = objective(batch, generator())
    mean = by_hand_mean(seen["hidden"].detach(), batch["attention_mask"])
    sentence = seen["sentence"].detach()[:, 0]
    torch.testing.assert_close(sentence, F.normalize(mean, dim=-1) * math.sqrt(HIDDEN))
    cls = F.normalize(seen["hidden"].detach()[:, 0], dim=-1) * math.sqrt(HIDDEN)
    assert (sentence - cls).norm(dim=-1).min() > 1.0  # [CLS] would be another vector
    if "contrastive" in losses:  # InfoNCE on the cosine of the same pooled vectors, temperature 0.05
        torch.testing.assert_close(losses["contrastive"], contrastive_loss(mean, 0.05))


def test_the_decoders_loss_reaches_every_real_token_through_the_bottleneck(tiny_tokenizer):
    objective = pooled_objective("retromae", tiny_tokenizer)
    batch = make_batch(tiny_tokenizer, count=2)
    hidden = torch.randn(2, batch["input_ids"].shape[1], HIDDEN, generator=generator(), requires_grad=True)
    _, sentence = objective.bottleneck(hidden, batch["attention_mask"])
    objective.decoder_loss(batch, sentence, generator()).backward()
    reached = hidden.grad.norm(dim=-1) > 0  # (B, L)
    assert torch.equal(reached, batch["attention_mask"].bool())  # every real position, [CLS] among them; no padding


@pytest.mark.parametrize("name,options", [("retromae", {"decoding": "enhanced"}), ("retromae", {"decoding": "basic"}),
                                          ("retromae+contrastive", {})])
def test_pretrain_keeps_the_cls_state_and_its_numbers_by_default(tiny_tokenizer, monkeypatch, name, options):
    objective = build(name, tiny_tokenizer, **options).eval()  # a run's flat config, as `retromae pretrain` gives
    assert (objective.pooling, objective.normalize) == ("cls", False)
    batch = make_batch(tiny_tokenizer)
    seen = spy(objective, monkeypatch)
    losses = objective(batch, generator(3))
    assert torch.equal(seen["sentence"], seen["hidden"][:, :1])  # the [CLS] state itself, as before
    monkeypatch.undo()
    drawn = generator(3)  # the same draws, through the [CLS] path by hand
    hidden, encoder_loss = objective.encode_masked(batch, drawn)
    decoder_loss = objective.decoder_loss(batch, hidden[:, :1], drawn)
    torch.testing.assert_close(losses["decoder"], decoder_loss.detach(), rtol=0, atol=0)
    torch.testing.assert_close(losses["encoder_mlm"], encoder_loss.detach(), rtol=0, atol=0)
    if "contrastive" in losses:
        torch.testing.assert_close(losses["contrastive"], contrastive_loss(hidden[:, 0], 0.05), rtol=0, atol=0)
