"""RetroMAE and MLM objectives on tiny models: losses, gradients, determinism, overfitting, head sharing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from conftest import make_sentences, tiny_bert_config
from transformers import BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

from retromae.objectives import build_objective
from retromae.objectives.retromae import RetroMAE


def settings(**overrides):
    values = dict(encoder_mask_ratio=0.3, decoder_mask_ratio=0.5, whole_word_mask=False,
                  decoding="enhanced", decoder_layers=1)
    values.update(overrides)
    return SimpleNamespace(**values)


def make_batch(tokenizer, count: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    encoded = tokenizer(make_sentences(count, seed=seed), padding=True, truncation=True, max_length=48,
                        return_special_tokens_mask=True, return_tensors="pt")
    word_ids = [encoded.word_ids(i) for i in range(count)]
    starts = torch.tensor([[w is not None and (j == 0 or row[j - 1] != w) for j, w in enumerate(row)]
                           for row in word_ids])
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"],
            "special_tokens_mask": encoded["special_tokens_mask"].bool(), "word_starts": starts}


def build(name: str, tokenizer, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    model = BertForMaskedLM(tiny_bert_config(len(tokenizer)))
    return build_objective(name, model, tokenizer, settings(**overrides))


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name,overrides,keys", [
    ("retromae", {"decoding": "enhanced"}, {"loss", "encoder_mlm", "decoder"}),
    ("retromae", {"decoding": "basic"}, {"loss", "encoder_mlm", "decoder"}),
    ("retromae", {"decoding": "basic", "decoder_layers": 2}, {"loss", "encoder_mlm", "decoder"}),
    ("retromae", {"whole_word_mask": True}, {"loss", "encoder_mlm", "decoder"}),
    ("mlm", {}, {"loss", "encoder_mlm"}),
])
def test_losses_are_named_finite_and_reach_the_encoder(tiny_tokenizer, name, overrides, keys):
    objective = build(name, tiny_tokenizer, **overrides)
    losses = objective(make_batch(tiny_tokenizer), generator())
    assert set(losses) == keys
    assert all(torch.isfinite(v) for v in losses.values())
    if "decoder" in losses:
        torch.testing.assert_close(losses["loss"].detach(), losses["encoder_mlm"] + losses["decoder"])
    losses["loss"].backward()
    encoder_layer = objective.encoder.base_model.encoder.layer[0].attention.self.query.weight
    assert encoder_layer.grad is not None and encoder_layer.grad.abs().sum() > 0


def test_decoder_is_one_layer_and_is_trained(tiny_tokenizer):
    objective = build("retromae", tiny_tokenizer)
    assert len(objective.decoder) == 1
    objective(make_batch(tiny_tokenizer), generator())["loss"].backward()
    assert objective.decoder[0].query.weight.grad.abs().sum() > 0


def test_deterministic_under_a_seed(tiny_tokenizer):
    batch = make_batch(tiny_tokenizer)
    first = build("retromae", tiny_tokenizer).eval()(batch, generator(3))
    second = build("retromae", tiny_tokenizer).eval()(batch, generator(3))
    third = build("retromae", tiny_tokenizer).eval()(batch, generator(4))
    assert torch.equal(first["loss"], second["loss"])
    assert not torch.equal(first["loss"], third["loss"])


def test_decoder_shares_embeddings_and_tied_head(tiny_tokenizer):
    objective = build("retromae", tiny_tokenizer)
    embeddings = objective.encoder.get_input_embeddings().weight
    assert objective.encoder.get_output_embeddings().weight is embeddings
    names = set(objective.head_state_dict())
    assert any(n.startswith("decoder.") for n in names) and any(n.startswith("encoder.cls.") for n in names)
    assert not any("word_embeddings" in n or n.startswith("lm_head") for n in names)


def test_vocabulary_projection_runs_only_at_masked_positions(tiny_tokenizer):
    objective = build("mlm", tiny_tokenizer)
    rows = []
    objective.lm_head.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[0]))
    batch = make_batch(tiny_tokenizer, count=8)
    objective(batch, generator())
    real_tokens = int((~batch["special_tokens_mask"]).sum())
    assert 0 < rows[0] < 0.5 * real_tokens


@pytest.mark.parametrize("decoding", ["enhanced", "basic"])
def test_loss_falls_when_overfitting_a_few_blocks(tiny_tokenizer, decoding):
    objective = build("retromae", tiny_tokenizer, decoding=decoding).eval()  # no dropout: pure memorisation
    batch = make_batch(tiny_tokenizer, count=4)
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-2)
    losses = []
    for step in range(60):
        loss = objective(batch, generator(step))["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


def test_bf16_autocast_gives_finite_losses(tiny_tokenizer):
    objective = build("retromae", tiny_tokenizer, decoder_mask_ratio=0.9)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = objective(make_batch(tiny_tokenizer), generator())
    assert all(torch.isfinite(v) for v in losses.values())


def test_roberta_backbone_works(tiny_tokenizer):
    config = RobertaConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=130, pad_token_id=tiny_tokenizer.pad_token_id)
    objective = build_objective("retromae", RobertaForMaskedLM(config), tiny_tokenizer, settings())
    losses = objective(make_batch(tiny_tokenizer), generator())
    assert torch.isfinite(losses["loss"])


def test_enhanced_decoding_rejects_deeper_decoders(tiny_tokenizer):
    with pytest.raises(ValueError, match="one decoder layer"):
        RetroMAE(BertForMaskedLM(tiny_bert_config(len(tiny_tokenizer))), build("mlm", tiny_tokenizer).masking,
                 decoding="enhanced", decoder_layers=2)
