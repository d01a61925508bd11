"""Every objective on tiny models: losses, gradients, determinism, overfitting, head sharing, decoder specifics."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from conftest import make_sentences, tiny_bert_config
from transformers import BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

from retromae.losses.losses import info_nce
from retromae.models.masked_lm import label_capacity
from retromae.objectives import OBJECTIVES, build_objective
from retromae.objectives.retromae import RetroMAE
from retromae.objectives.seed import next_token_labels


def settings(**overrides):
    values = dict(encoder_mask_ratio=0.3, decoder_mask_ratio=0.5, whole_word_mask=False,
                  decoding="enhanced", decoder_layers=None, attention_window=2, temperature=None, bow_weight=0.1,
                  skip_from=None, momentum=0.9995, queue_size=64, pairs=None, contrastive_weight=None)
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
    ("seed", {}, {"loss", "encoder_mlm", "decoder"}),
    ("contrastive", {}, {"loss", "contrastive"}),
    ("retromae+contrastive", {}, {"loss", "encoder_mlm", "decoder", "contrastive"}),
])
def test_losses_are_named_finite_and_reach_the_encoder(tiny_tokenizer, name, overrides, keys):
    objective = build(name, tiny_tokenizer, **overrides)
    losses = objective(make_batch(tiny_tokenizer), generator())  # 4 rows: 2 pairs for the contrastive objectives
    assert set(losses) == keys
    assert all(torch.isfinite(v) for v in losses.values())
    parts = [value for key, value in losses.items() if key != "loss"]
    torch.testing.assert_close(losses["loss"].detach(), sum(parts))
    losses["loss"].backward()
    encoder_layer = objective.encoder.base_model.encoder.layer[0].attention.self.query.weight
    assert encoder_layer.grad is not None and encoder_layer.grad.abs().sum() > 0


def test_decoder_is_one_layer_and_is_trained(tiny_tokenizer):
    objective = build("retromae", tiny_tokenizer)
    assert len(objective.decoder) == 1
    objective(make_batch(tiny_tokenizer), generator())["loss"].backward()
    assert objective.decoder[0].query.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_deterministic_under_a_seed(tiny_tokenizer, name):
    batch = make_batch(tiny_tokenizer)
    first = build(name, tiny_tokenizer).eval()(batch, generator(3))
    second = build(name, tiny_tokenizer).eval()(batch, generator(3))
    assert all(torch.equal(first[key], second[key]) for key in first)
    # Masks and deletions come from the generator; the clean encoder passes of the contrastive objectives draw
    # nothing. Compared on the word embeddings' gradient, whose rows follow which tokens were masked or deleted: the
    # loss alone can differ by a few float32 ulps only (TSDAE's fresh decoder barely reads the sentence vector).
    gradients = [embedding_gradient(name, tiny_tokenizer, batch, seed) for seed in (3, 4)]
    assert torch.equal(*gradients) == (name in ("contrastive", "contriever", "simcse", "cropping"))


def embedding_gradient(name: str, tokenizer, batch: dict[str, torch.Tensor], seed: int) -> torch.Tensor:
    """The gradient of the objective's loss on the encoder's word embeddings, under generator `seed`."""
    objective = build(name, tokenizer).eval()
    objective(batch, generator(seed))["loss"].backward()
    return objective.encoder.get_input_embeddings().weight.grad


def test_decoder_shares_embeddings_and_tied_head(tiny_tokenizer):
    objective = build("retromae", tiny_tokenizer)
    embeddings = objective.encoder.get_input_embeddings().weight
    assert objective.encoder.get_output_embeddings().weight is embeddings
    names = set(objective.head_state_dict())
    assert any(n.startswith("decoder.") for n in names) and any(n.startswith("encoder.cls.") for n in names)
    assert not any("word_embeddings" in n or n.startswith("lm_head") for n in names)


def test_vocabulary_projection_runs_only_at_masked_positions(tiny_tokenizer):
    """On a fixed number of positions (the masked ones first): the mask ratio plus a margin that shrinks with the
    batch (`label_capacity`; 33% of a batch of 32 blocks of 512 at ratio 0.3)."""
    objective = build("mlm", tiny_tokenizer)
    rows = []
    objective.vocabulary.transform.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[0]))
    batch = make_batch(tiny_tokenizer, count=16)
    objective(batch, generator())
    positions = batch["input_ids"].numel()
    assert rows == [label_capacity(positions, 0.3)] and rows[0] < 0.6 * positions


@pytest.mark.parametrize("name,decoding,steps,fresh_masks", [
    ("retromae", "enhanced", 60, True), ("retromae", "basic", 60, True), ("mlm", "enhanced", 25, False),
    ("seed", "enhanced", 25, False), ("contrastive", "enhanced", 15, False),
    ("retromae+contrastive", "enhanced", 50, False),  # three losses: slower to halve
])
def test_loss_falls_when_overfitting_a_few_blocks(tiny_tokenizer, name, decoding, steps, fresh_masks):
    objective = build(name, tiny_tokenizer, decoding=decoding).eval()  # no dropout: pure memorisation
    batch = make_batch(tiny_tokenizer, count=4)
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        loss = objective(batch, generator(step if fresh_masks else 0))["loss"]
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


# --- SEED-Encoder ------------------------------------------------------------------------------------------


def test_seed_decoder_is_three_weak_layers_on_shared_embeddings(tiny_tokenizer):
    objective = build("seed", tiny_tokenizer)
    assert len(objective.weak_decoder) == 3 and objective.attention_window == 2
    objective(make_batch(tiny_tokenizer), generator())["loss"].backward()
    assert all(layer.query.weight.grad.abs().sum() > 0 for layer in objective.weak_decoder)
    names = set(objective.head_state_dict())
    assert any(n.startswith("weak_decoder.2.") for n in names) and any(n.startswith("encoder.cls.") for n in names)
    assert not any(n.startswith("decoder.") or "word_embeddings" in n for n in names)


def test_next_token_labels_skip_special_tokens_and_padding():
    ids = torch.tensor([[101, 7, 8, 9, 102, 0]])
    special = torch.tensor([[True, False, False, False, True, True]])
    assert next_token_labels(ids, special).tolist() == [[7, 8, 9, -100, -100, -100]]


@pytest.mark.parametrize("layers,window", [(1, 2), (3, 2), (1, 1)])
def test_seed_row_sees_cls_and_only_its_window(tiny_tokenizer, layers, window):
    """Row i (predicting token i + 1) depends on tokens i - r + 1 .. i, r = layers * (window - 1) + 1, not before."""
    objective = build("seed", tiny_tokenizer, decoder_layers=layers, attention_window=window).eval()
    batch = make_batch(tiny_tokenizer, count=1)
    reach, row = layers * (window - 1) + 1, 12
    cls = torch.randn(1, 1, 32, generator=generator())

    def decoded(ids: torch.Tensor, cls_embedding: torch.Tensor = cls) -> torch.Tensor:
        return objective.decode({**batch, "input_ids": ids}, cls_embedding)[0, row]

    base = decoded(batch["input_ids"])
    for position, expect_change in ((row - reach, False), (row - reach + 1, True), (row + 1, False)):
        changed = batch["input_ids"].clone()
        changed[0, position] = (changed[0, position] + 1) % len(tiny_tokenizer)
        assert (not torch.equal(decoded(changed), base)) == expect_change, position  # hidden columns weigh exactly 0
    assert not torch.equal(decoded(batch["input_ids"], cls + 1.0), base)  # conditioned on [CLS]


# --- contrastive objectives --------------------------------------------------------------------------------


def test_contrastive_loss_is_info_nce_of_clean_cls_cosines(tiny_tokenizer):
    objective = build("contrastive", tiny_tokenizer, temperature=0.1).eval()
    batch = make_batch(tiny_tokenizer, count=6)  # rows 0-2 first views, rows 3-5 their positives
    hidden = objective.encoder.base_model(input_ids=batch["input_ids"],
                                          attention_mask=batch["attention_mask"]).last_hidden_state
    cls = torch.nn.functional.normalize(hidden[:, 0], dim=-1)
    expected = info_nce(cls[:3], cls[3:], 0.1, torch.arange(3))
    torch.testing.assert_close(objective(batch, generator())["loss"], expected)


def test_contrastive_trains_the_encoder_but_not_the_unused_mlm_head(tiny_tokenizer):
    objective = build("contrastive", tiny_tokenizer)
    trainable = {name for name, p in objective.named_parameters() if p.requires_grad}
    assert "encoder.bert.embeddings.word_embeddings.weight" in trainable  # tied to the MLM decoder, still trained
    assert not any(name.startswith("encoder.cls.") for name in trainable)
    assert set(objective.head_state_dict()) == set(build("mlm", tiny_tokenizer).head_state_dict())


def test_retromae_contrastive_keeps_retromae_head_names(tiny_tokenizer):
    assert set(build("retromae+contrastive", tiny_tokenizer).head_state_dict()) == \
        set(build("retromae", tiny_tokenizer).head_state_dict())


@pytest.mark.parametrize("name", ["contrastive", "retromae+contrastive"])
def test_pair_batches_need_an_even_number_of_rows(tiny_tokenizer, name):
    with pytest.raises(ValueError, match="even number of rows"):
        build(name, tiny_tokenizer)(make_batch(tiny_tokenizer, count=3), generator())


def test_contrastive_weight_scales_only_the_infonce_term(tiny_tokenizer):
    batch = make_batch(tiny_tokenizer)  # 2 pairs
    losses = {w: build("retromae+contrastive", tiny_tokenizer, contrastive_weight=w)(batch, generator(3))
              for w in (None, 0.0, 2.5)}
    retromae = build("retromae", tiny_tokenizer)(batch, generator(3))  # the same masks: the same reconstruction
    for key in ("encoder_mlm", "decoder"):
        torch.testing.assert_close(losses[0.0][key], retromae[key])
        torch.testing.assert_close(losses[2.5][key], retromae[key])
    reconstruction = retromae["loss"].detach()
    torch.testing.assert_close(losses[0.0]["loss"].detach(), reconstruction)
    torch.testing.assert_close(losses[None]["loss"].detach(), reconstruction + losses[None]["contrastive"])
    torch.testing.assert_close(losses[2.5]["loss"].detach(), reconstruction + 2.5 * losses[2.5]["contrastive"])


def test_a_zero_contrastive_weight_still_logs_the_contrastive_loss_but_trains_retromae_alone(tiny_tokenizer):
    objective = build("retromae+contrastive", tiny_tokenizer, contrastive_weight=0.0)
    reference = build("retromae", tiny_tokenizer)
    batch = make_batch(tiny_tokenizer)
    losses = objective(batch, generator(5))
    assert losses["contrastive"] > 0
    losses["loss"].backward()
    reference(batch, generator(5))["loss"].backward()
    weight = "encoder.bert.encoder.layer.0.attention.self.query.weight"
    torch.testing.assert_close(dict(objective.named_parameters())[weight].grad,
                               dict(reference.named_parameters())[weight].grad)


def test_a_negative_contrastive_weight_is_refused(tiny_tokenizer):
    with pytest.raises(ValueError, match="--contrastive-weight: must be 0 or positive, got -1.0"):
        build("retromae+contrastive", tiny_tokenizer, contrastive_weight=-1.0)
