"""The vocabulary losses fused with their projection (`retromae.losses.fused_loss`) against the unfused path: the
kernels alone (cross-entropy, DupMAE's max-pool) in float32 and under bf16 autocast, every objective that projects onto
the vocabulary, the head split of every backbone family, the option, exports, and Liger Kernel on CUDA."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_bert_config
from test_backbones import family_tokenizers, tiny_model  # noqa: F401 (a fixture)
from test_objectives import build, generator, make_batch, settings
from transformers import AutoConfig, BertForMaskedLM

from retromae.backbones.registry import ARCHITECTURES, adapter_for
from retromae.losses import liger_installed
from retromae.losses.fused_loss import (
    IGNORE_INDEX,
    PAD_MULTIPLE,
    linear_cross_entropy_sum,
    linear_max_pool,
    padded_projection,
    resolved_kind,
)
from retromae.models.export import export_encoder
from retromae.objectives import build_objective
from retromae.objectives.dupmae import max_pooled_logits

VOCAB = 100  # padded to 128 inside the loss
CELLS = 3 * 128  # three rows a chunk: every path crosses chunk boundaries


def problem(rows: int = 10, width: int = 16, seed: int = 0, unlabelled: float = 0.3):
    """x (N, E), weight (V, E), bias (V,) needing gradients, and labels (N,) with some rows unlabelled."""
    torch.manual_seed(seed)
    x = torch.randn(rows, width, requires_grad=True)
    weight = torch.randn(VOCAB, width, requires_grad=True)
    bias = torch.randn(VOCAB, requires_grad=True)
    labels = torch.randint(VOCAB, (rows,))
    labels[torch.rand(rows) < unlabelled] = IGNORE_INDEX
    return x, weight, bias, labels


def gradients(loss: torch.Tensor, *tensors: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, tensors))


def unfused_sum(x, weight, bias, labels):
    return F.cross_entropy(F.linear(x, weight, bias).float(), labels, ignore_index=IGNORE_INDEX, reduction="sum")


def test_padding_is_a_whole_number_of_tiles_that_never_wins():
    weight, bias = torch.randn(VOCAB, 4), torch.randn(VOCAB)
    padded_weight, padded_bias = padded_projection(weight, bias, torch.float32)
    assert padded_weight.shape == (128, 4) and padded_weight.shape[0] % PAD_MULTIPLE == 0
    assert torch.equal(padded_weight[VOCAB:], torch.zeros(28, 4)) and torch.equal(padded_weight[:VOCAB], weight)
    assert torch.all(padded_bias[VOCAB:] == torch.finfo(torch.float32).min)
    assert padded_projection(torch.randn(128, 4), None, torch.bfloat16)[0].shape == (128, 4)  # already whole


@pytest.mark.parametrize("cells", [CELLS, 2**24])
@pytest.mark.parametrize("use_onednn", [True, False])  # chunked, chunked-torch
def test_chunked_cross_entropy_equals_the_unfused_one_in_float32(cells, use_onednn):
    x, weight, bias, labels = problem(rows=11)  # 11 rows: the last chunk is short
    expected = unfused_sum(x, weight, bias, labels)
    loss = linear_cross_entropy_sum(x, weight, bias, labels, cells, use_onednn)
    torch.testing.assert_close(loss, expected)
    expected_grads = gradients(3 * expected, x, weight, bias)
    for ours, theirs in zip(gradients(3 * loss, x, weight, bias), expected_grads, strict=True):
        torch.testing.assert_close(ours, theirs)


def test_chunked_cross_entropy_equals_the_unfused_one_under_bf16_autocast():
    x, weight, bias, labels = problem(rows=12, width=32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = unfused_sum(x, weight, bias, labels)
        loss = linear_cross_entropy_sum(x, weight, bias, labels, CELLS)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, expected, rtol=1e-3, atol=1e-3)
    for ours, theirs in zip(gradients(loss, x, weight, bias), gradients(expected, x, weight, bias), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)


def test_rows_without_labels_give_zero_loss_and_no_gradient():
    x, weight, bias, labels = problem(unlabelled=1.0)
    loss = linear_cross_entropy_sum(x, weight, bias, labels, CELLS)
    assert loss.item() == 0.0
    assert all(torch.count_nonzero(grad) == 0 for grad in gradients(loss, x, weight, bias))


def test_without_gradients_only_the_loss_is_computed():
    x, weight, bias, labels = problem()
    with torch.no_grad():
        loss = linear_cross_entropy_sum(x, weight, bias, labels, CELLS)
    torch.testing.assert_close(loss, unfused_sum(x, weight, bias, labels).detach())
    assert loss.grad_fn is None


def pool_problem(seed: int = 0):
    """States (B, L, E) and a visibility mask (B, L) with hidden positions and one row of a single position."""
    torch.manual_seed(seed)
    x = torch.randn(3, 9, 16, requires_grad=True)
    visible = torch.rand(3, 9) > 0.3
    visible[2] = False
    visible[2, 4] = True
    weight = torch.randn(VOCAB, 16, requires_grad=True)
    bias = torch.randn(VOCAB, requires_grad=True)
    return x, weight, bias, visible


def unfused_pool(x, weight, bias, visible):
    logits = F.linear(x, weight, bias).float()  # (B, L, V)
    return logits.masked_fill(~visible[..., None], torch.finfo(torch.float32).min).max(dim=1).values


@pytest.mark.parametrize("cells", [2 * 3 * 128, 2**24])  # two positions a chunk, or all at once
@pytest.mark.parametrize("use_onednn", [True, False])  # chunked, chunked-torch
def test_chunked_max_pool_equals_the_unfused_one_with_its_gradients(cells, use_onednn):
    x, weight, bias, visible = pool_problem()
    expected = unfused_pool(x, weight, bias, visible)
    pooled = linear_max_pool(x, weight, bias, visible, cells, use_onednn)
    torch.testing.assert_close(pooled, expected)
    upstream = torch.randn_like(expected)
    ours = gradients((pooled * upstream).sum(), x, weight, bias)
    theirs = gradients((expected * upstream).sum(), x, weight, bias)
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine, reference)
    assert torch.count_nonzero(ours[0][~visible]) == 0  # hidden positions get nothing


def test_chunked_max_pool_under_bf16_autocast():
    x, weight, bias, visible = pool_problem(seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = unfused_pool(x, weight, bias, visible)
        pooled = linear_max_pool(x, weight, bias, visible, 2 * 3 * 128)
    torch.testing.assert_close(pooled, expected)  # the same bf16 logits, pooled
    upstream = torch.randn_like(expected)
    for mine, reference in zip(gradients((pooled * upstream).sum(), x, weight, bias),
                               gradients((expected * upstream).sum(), x, weight, bias), strict=True):
        torch.testing.assert_close(mine, reference, rtol=2e-2, atol=2e-2)


def test_dupmae_pools_past_cls_and_before_padding_like_its_reference():
    x, weight, bias, visible = pool_problem()
    attention = visible.long()
    head = torch.nn.Linear(16, VOCAB)
    head.weight, head.bias = torch.nn.Parameter(weight.detach()), torch.nn.Parameter(bias.detach())
    expected = max_pooled_logits(head(x), attention)
    torch.testing.assert_close(linear_max_pool(x[:, 1:], weight, bias, visible[:, 1:], 2 * 3 * 128), expected)


CASES = {
    "retromae enhanced": ("retromae", {}),
    "retromae basic, 2 layers": ("retromae", {"decoding": "basic", "decoder_layers": 2}),
    "mlm": ("mlm", {}),
    "seed": ("seed", {}),
    "dupmae": ("dupmae", {}),
    "condenser": ("condenser", {}),
    "cocondenser": ("cocondenser", {}),
    "retromae+contrastive": ("retromae+contrastive", {}),
    "tsdae": ("tsdae", {}),
}


def fused_and_unfused(tokenizer, name: str, overrides: dict, cells: int = 4 * 256):
    """The objective built twice from the same weights, fused (in chunks of four rows) and unfused; no dropout."""
    fused, unfused = build(name, tokenizer, **overrides).eval(), build(name, tokenizer, **overrides).eval()
    unfused.use_vocabulary_loss("unfused")
    fused.vocabulary = dataclasses.replace(fused.vocabulary, cells=cells)
    return fused, unfused


def losses_and_gradients(objective, batch, autocast: bool = False):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        losses = objective(batch, generator())
    losses["loss"].backward()
    return losses, {name: p.grad for name, p in objective.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("case", list(CASES))
def test_every_objective_has_the_same_losses_and_gradients_fused(tiny_tokenizer, case):
    name, overrides = CASES[case]
    fused, unfused = fused_and_unfused(tiny_tokenizer, name, overrides)
    assert fused.vocabulary.kind == "auto" and fused.vocabulary.fused  # the default
    batch = make_batch(tiny_tokenizer)
    ours, our_grads = losses_and_gradients(fused, batch)
    theirs, their_grads = losses_and_gradients(unfused, batch)
    assert set(ours) == set(theirs) and set(our_grads) == set(their_grads)
    for key in ours:
        torch.testing.assert_close(ours[key], theirs[key])
    for key in our_grads:
        torch.testing.assert_close(our_grads[key], their_grads[key], rtol=1e-4, atol=1e-6)


def test_blockwise_enhanced_decoding_is_fused_too(tiny_tokenizer):
    """Long inputs decode a block of query rows at a time, recomputed in the backward pass."""
    fused, unfused = fused_and_unfused(tiny_tokenizer, "retromae", {})
    fused.mask_cells = unfused.mask_cells = 4 * 48 * 8  # 8 rows a block
    batch = make_batch(tiny_tokenizer)
    ours, our_grads = losses_and_gradients(fused, batch)
    theirs, their_grads = losses_and_gradients(unfused, batch)
    torch.testing.assert_close(ours["decoder"], theirs["decoder"])
    for key in our_grads:
        torch.testing.assert_close(our_grads[key], their_grads[key], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["retromae", "dupmae"])
def test_objectives_agree_under_bf16_autocast(tiny_tokenizer, name):
    fused, unfused = fused_and_unfused(tiny_tokenizer, name, {})
    batch = make_batch(tiny_tokenizer)
    ours, our_grads = losses_and_gradients(fused, batch, autocast=True)
    theirs, their_grads = losses_and_gradients(unfused, batch, autocast=True)
    for key in ours:
        torch.testing.assert_close(ours[key], theirs[key], rtol=2e-3, atol=2e-3)
    for key in our_grads:
        scale = their_grads[key].abs().max().clamp(min=1e-3)
        assert (our_grads[key] - their_grads[key]).abs().max() / scale < 5e-2, key


def test_the_same_loss_curve_over_training_steps(tiny_tokenizer):
    """40 AdamW steps on fresh masks each step: the fused run follows the unfused one to float tolerance."""
    curves = []
    for kind in ("auto", "unfused"):
        objective = build("dupmae", tiny_tokenizer).eval()  # dupmae: encoder MLM, decoder and bag of words
        objective.use_vocabulary_loss(kind)
        optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-3)
        curve = []
        for step in range(40):
            loss = objective(make_batch(tiny_tokenizer, seed=step % 4), generator(step))["loss"]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            curve.append(loss.item())
        curves.append(curve)
    torch.testing.assert_close(torch.tensor(curves[0]), torch.tensor(curves[1]), rtol=1e-4, atol=1e-5)
    assert curves[0][-1] < curves[0][0]


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_every_family_splits_its_head_into_transform_and_projection(family_tokenizers, architecture):  # noqa: F811
    model = tiny_model(architecture, family_tokenizers[architecture]).eval()
    adapter = adapter_for(model)
    transform, projection = adapter.vocabulary_projection(model)
    assert projection.weight is model.get_output_embeddings().weight  # the tied matrix itself
    states = torch.randn(5, 64)
    torch.testing.assert_close(projection(transform(states)), adapter.mlm_head(model)(states))


def test_the_option_reaches_the_objective_and_compile_follows_it(tiny_tokenizer):
    assert build("retromae", tiny_tokenizer).vocabulary.kind == "auto"
    model = BertForMaskedLM(tiny_bert_config(len(tiny_tokenizer)))
    objective = build_objective("retromae", model, tiny_tokenizer, settings(vocabulary_loss="unfused"))
    assert not objective.vocabulary.fused
    assert objective.compiled_modules()[1] is objective.lm_head  # the whole head, as before
    fused = build("retromae", tiny_tokenizer)
    assert fused.compiled_modules()[1] is fused.vocabulary.transform  # the projection runs in the fused loss
    with pytest.raises(ValueError, match="vocabulary loss 'fast'"):
        fused.use_vocabulary_loss("fast")
    fused.use_vocabulary_loss("chunked-torch")  # PyTorch's products (MKL on the CPU) rather than oneDNN's
    assert fused.vocabulary.fused and not fused.vocabulary.use_onednn


def test_auto_is_chunked_on_the_cpu_and_unfused_on_cuda():
    """On an H100 the unfused path was the fastest end to end (docs/performance.md); on the CPU the chunked one."""
    assert resolved_kind("auto", torch.device("cpu")) == "chunked"
    assert resolved_kind("auto", torch.device("cuda", 0)) == "unfused"
    for kind in ("chunked", "chunked-torch", "liger", "unfused"):
        assert resolved_kind(kind, torch.device("cuda")) == kind == resolved_kind(kind, torch.device("cpu"))


def test_exports_keep_the_real_vocabulary(tiny_tokenizer, tmp_path):
    """The padding lives inside the loss: after a fused training step the model and its export are unchanged in
    shape."""
    objective = build("retromae", tiny_tokenizer)
    vocab = len(tiny_tokenizer)
    assert vocab % PAD_MULTIPLE  # a width the loss pads
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-3)
    objective(make_batch(tiny_tokenizer), generator())["loss"].backward()
    optimizer.step()
    export_encoder(objective.encoder, tiny_tokenizer, tmp_path / "encoder")
    assert AutoConfig.from_pretrained(tmp_path / "encoder").vocab_size == vocab
    assert objective.encoder.get_input_embeddings().weight.shape[0] == vocab
    assert objective.lm_head.predictions.decoder.bias.shape == (vocab,)


@pytest.mark.skipif(not (torch.cuda.is_available() and liger_installed()), reason="needs CUDA and liger-kernel")
def test_liger_gives_the_cpu_paths_numbers():
    from retromae.losses.fused_loss import liger_cross_entropy_sum

    x, weight, bias, labels = problem(rows=64, width=64)
    expected = linear_cross_entropy_sum(x, weight, bias, labels, CELLS)
    expected_grads = gradients(expected, x, weight, bias)
    on_gpu = [t.detach().cuda().requires_grad_() for t in (x, weight, bias)]
    loss = liger_cross_entropy_sum(*on_gpu, labels.cuda())
    torch.testing.assert_close(loss.cpu(), expected, rtol=1e-4, atol=1e-4)
    for ours, theirs in zip(gradients(loss, *on_gpu), expected_grads, strict=True):
        torch.testing.assert_close(ours.cpu(), theirs, rtol=1e-3, atol=1e-4)
