"""Every backbone family (BERT, RoBERTa, XLM-R, ModernBERT, DeBERTa-v3) under every objective, on tiny models built in
code: the adapter registry, decoder positions, tokenizers of each kind, init-model, export and resume."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from conftest import kill_after_checkpoint, make_sentences, run_metrics, shared_data, tiny_pretrain_config
from test_objectives import generator, make_batch, settings
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer, DistilBertConfig, DistilBertForMaskedLM

from retromae.backbones.deberta import rotary_table
from retromae.backbones.registry import ARCHITECTURES, adapter_for, architecture_adapter
from retromae.cli import main
from retromae.data.token_store import word_starts_of
from retromae.models import masked_lm as backbone
from retromae.models.tokenizer_training import BRACKET_TOKENS, KINDS, train_tokenizer
from retromae.objectives import OBJECTIVES, build_objective
from retromae.objectives.layers import apply_rotary
from retromae.objectives.masking import select_positions
from retromae.pretraining.scratch import family_tokenizer
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.options import ConfigError

FAMILIES = tuple(ARCHITECTURES)  # bert, roberta, xlm-roberta, modernbert, deberta-v2
VOCAB = {"wordpiece": 200, "unigram": 200, "byte-level-bpe": 400}  # byte-level BPE starts from 256 bytes
ALL_OBJECTIVES = tuple(sorted(OBJECTIVES))


def kind_of(architecture: str) -> str:
    return architecture_adapter(architecture).architectures[architecture]


@pytest.fixture(scope="session")
def family_tokenizers():
    """One tokenizer per architecture, of the kind its family uses, trained on the tiny sentences."""
    texts = make_sentences(500)
    return {name: family_tokenizer(texts, name, VOCAB[kind_of(name)]) for name in FAMILIES}


def tiny_model(architecture: str, tokenizer, seed: int = 0, attention: str | None = None):
    """A random 2-layer masked LM of `architecture`, hidden 64 (one head)."""
    special = {"pad": tokenizer.pad_token_id, "cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id}
    config = architecture_adapter(architecture).scratch_config(architecture, len(tokenizer), special, hidden_size=64,
                                                               layers=2, max_positions=128)
    torch.manual_seed(seed)
    return AutoModelForMaskedLM.from_config(config, attn_implementation=attention)


@pytest.fixture(scope="session")
def family_model_dirs(tmp_path_factory, family_tokenizers):
    """A folder per architecture holding its tiny model and tokenizer, loadable like a hub checkpoint."""
    folders = {}
    for name, tokenizer in family_tokenizers.items():
        folders[name] = tmp_path_factory.mktemp(name)
        tiny_model(name, tokenizer).save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


# --- the registry -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture,positions,limit", [
    ("bert", "absolute", 128), ("roberta", "absolute", 128), ("xlm-roberta", "absolute", 128),
    ("modernbert", "rotary", 128), ("deberta-v2", "relative", 128)])
def test_each_family_says_its_position_scheme_and_longest_input(family_tokenizers, architecture, positions, limit):
    model = tiny_model(architecture, family_tokenizers[architecture])
    assert adapter_for(model).positions == positions
    assert backbone.position_limit(model.config) == limit  # RoBERTa's two rows before the first position excluded
    logits = adapter_for(model).mlm_head(model)(torch.randn(3, 64))
    assert logits.shape == (3, len(family_tokenizers[architecture]))
    ids = torch.randint(5, 100, (2, 20))
    layers = backbone.layer_hidden_states(model.eval(), ids, torch.ones_like(ids))
    assert len(layers) == 3  # embeddings, then each layer; the last as the MLM head reads it (ModernBERT's normed)
    torch.testing.assert_close(layers[-1], backbone.hidden_states(model, ids, torch.ones_like(ids)))


def test_modernbert_keeps_its_local_attention_windows(family_tokenizers):
    """ModernBERT's body gets the 2D padding mask it builds its sliding windows from: the states of the model's own
    forward pass, which differ from those of an all-global pass."""
    model = tiny_model("modernbert", family_tokenizers["modernbert"])
    model.config.sliding_window = 4  # local layers see 4 tokens either side
    model.eval()
    ids = torch.randint(5, 100, (2, 40))
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0
    ours = backbone.hidden_states(model, ids, mask)
    torch.testing.assert_close(ours, model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state)
    all_global = model.base_model(input_ids=ids, attention_mask=mask.bool()[:, None, None, :]).last_hidden_state
    assert not torch.allclose(ours, all_global, atol=1e-3)


def test_an_architecture_no_adapter_knows_is_one_error_naming_what_is_missing(tiny_tokenizer):
    model = DistilBertForMaskedLM(DistilBertConfig(vocab_size=len(tiny_tokenizer), dim=32, n_layers=1, n_heads=2,
                                                   hidden_dim=64))
    with pytest.raises(ModelLoadError) as error:
        build_objective("retromae", model, tiny_tokenizer, settings())
    message = str(error.value)
    assert "'distilbert'" in message and "where its MLM head is (3 modules beside the base model)" in message
    for family in ("BERT (bert)", "RoBERTa/XLM-R (roberta, xlm-roberta", "ModernBERT (modernbert)",
                   "DeBERTa-v2/v3 (deberta-v2)"):
        assert family in message


def test_attention_kernel_follows_what_the_model_supports(family_tokenizers):
    deberta = type(tiny_model("deberta-v2", family_tokenizers["deberta-v2"]))
    modernbert = type(tiny_model("modernbert", family_tokenizers["modernbert"]))
    assert backbone.attention_implementation(deberta) == "eager"  # DeBERTa has no SDPA path in transformers
    assert backbone.attention_implementation(modernbert) == "sdpa"  # CPU: padded SDPA stays the default
    with pytest.raises(ConfigError, match="--attention sdpa: DebertaV2ForMaskedLM does not support it; give eager"):
        backbone.attention_implementation(deberta, "sdpa")


# --- every objective on every family ------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", FAMILIES)
@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_trains_every_family(family_tokenizers, architecture, name):
    tokenizer = family_tokenizers[architecture]
    # Contriever's unnormalised random vectors saturate its softmax at 0.05 (a loss of exactly 0): a milder one.
    options = settings(whole_word_mask=True, temperature=5.0 if name == "contriever" else None)
    objective = build_objective(name, tiny_model(architecture, tokenizer), tokenizer, options)
    losses = objective(make_batch(tokenizer), generator())
    assert all(torch.isfinite(value) for value in losses.values()), losses
    losses["loss"].backward()
    first_layer = next(p for n, p in objective.encoder.base_model.named_parameters() if "layer" in n and p.ndim == 2)
    assert first_layer.grad is not None and first_layer.grad.abs().sum() > 0
    own = [p for n, p in objective.named_parameters() if not n.startswith(("encoder.", "key_encoder."))]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in own if p.requires_grad)


def matrix(fast: set[tuple[str, str]], objectives: tuple[str, ...] = ALL_OBJECTIVES) -> list:
    """Every (family, objective) pair; the pairs outside `fast` marked slow, so that the default suite stays quick."""
    return [pytest.param(architecture, name, marks=() if (architecture, name) in fast else pytest.mark.slow)
            for architecture in FAMILIES for name in objectives]


RECONSTRUCTION = ("retromae", "mlm", "seed", "dupmae", "condenser")  # the objectives whose losses rebuild tokens


@pytest.mark.parametrize("architecture,name", matrix({(family, "retromae") for family in FAMILIES}, RECONSTRUCTION))
def test_loss_falls_on_real_text(family_tokenizers, architecture, name):
    """Thirty steps on SciFact abstracts (8 batches of 8 in turn, 64 tokens): every loss the objective logs falls by
    0.2 nats at least. The contrastive objectives are left out: on a random model of this size thirty steps do not
    lift 4 pairs off chance (ln 4); `test_every_objective_trains_every_family` checks their gradients on every
    family, and tests/test_field_objectives.py that they learn."""
    documents = [json.loads(line)["text"] for line in
                 shared_data("beir/scifact/corpus.jsonl").read_text().splitlines()[:64]]
    tokenizer = family_tokenizer(documents, architecture, 600)
    objective = build_objective(name, tiny_model(architecture, tokenizer), tokenizer, settings())
    optimizer = torch.optim.AdamW(objective.parameters(), lr=5e-3)
    losses = []
    for step in range(30):
        encoded = tokenizer(documents[step % 8 * 8:step % 8 * 8 + 8], truncation=True, max_length=64,
                            padding=True, return_special_tokens_mask=True, return_tensors="pt")
        batch = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"],
                 "special_tokens_mask": encoded["special_tokens_mask"].bool()}
        values = objective(batch, generator(step))
        optimizer.zero_grad()
        values["loss"].backward()
        optimizer.step()
        losses.append({key: value.item() for key, value in values.items()})
    for key in losses[0]:
        first, last = (sum(loss[key] for loss in window) / 4 for window in (losses[:4], losses[-4:]))
        assert last < first - 0.2, (key, [round(loss[key], 2) for loss in losses])


# --- decoder positions --------------------------------------------------------------------------------------------


def test_modernbert_decoder_rotates_as_the_backbone_does(family_tokenizers):
    from transformers.models.modernbert.modeling_modernbert import apply_rotary_pos_emb  # the backbone's own

    model = tiny_model("modernbert", family_tokenizers["modernbert"])
    positions = adapter_for(model).decoder_positions(model, 40, torch.device("cpu"))
    assert positions.absolute is None
    cos, sin = positions.rotary  # (L, Dh)
    hidden = torch.zeros(1, 40, 64)
    expected_cos, expected_sin = model.base_model.rotary_emb(hidden, torch.arange(40)[None], "full_attention")
    torch.testing.assert_close(cos, expected_cos[0])
    q, k = torch.randn(2, 1, 40, 64), torch.randn(2, 1, 40, 64)  # (B, H, L, Dh)
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos[None], sin[None])
    torch.testing.assert_close(apply_rotary(q, cos, sin), expected_q)
    torch.testing.assert_close(apply_rotary(k, cos, sin), expected_k)


def test_relative_backbones_decode_with_parameter_free_rotary_positions(family_tokenizers):
    """DeBERTa-v3 has no table to share: q_i . k_j after rotation depends on i - j alone, and no weight is added."""
    model = tiny_model("deberta-v2", family_tokenizers["deberta-v2"])
    positions = adapter_for(model).decoder_positions(model, 16, torch.device("cpu"))
    cos, sin = positions.rotary
    torch.testing.assert_close((cos, sin), rotary_table(16, 64, torch.device("cpu")))
    q, k = torch.randn(64), torch.randn(64)
    rotated_q = apply_rotary(q.expand(1, 1, 16, 64), cos, sin)[0, 0]  # (L, Dh): q at every position
    rotated_k = apply_rotary(k.expand(1, 1, 16, 64), cos, sin)[0, 0]
    scores = rotated_q @ rotated_k.T  # (L, L)
    torch.testing.assert_close(scores[3, 1], scores[12, 10], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(scores[5, 9], scores[0, 4], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("architecture", ["modernbert", "deberta-v2"])
def test_enhanced_decoding_without_a_position_table_tells_positions_apart(family_tokenizers, architecture):
    """The query stream is h_cls at every row; with the same visible tokens, rows differ only by their positions."""
    tokenizer = family_tokenizers[architecture]
    objective = build_objective("retromae", tiny_model(architecture, tokenizer), tokenizer, settings()).eval()
    rotary = objective.decoder_positions(8, torch.device("cpu")).rotary
    query, context = torch.randn(1, 1, 64).expand(1, 8, 64), torch.randn(1, 8, 64)
    everything = torch.ones(1, 8, 8, dtype=torch.bool)
    hidden = objective.decoder[0](query, context, everything, rotary)  # (1, 8, D)
    assert not torch.allclose(hidden[0, 2], hidden[0, 5])
    plain = objective.decoder[0](query, context, everything)
    torch.testing.assert_close(plain[0, 2], plain[0, 5])


# --- tokenizers of each kind and whole-word masks -----------------------------------------------------------------


@pytest.mark.parametrize("kind,marker", [("wordpiece", "##"), ("unigram", "▁"), ("byte-level-bpe", "Ġ")])
def test_whole_word_masks_for_each_tokenizer_kind(kind, marker):
    tokenizer = train_tokenizer(make_sentences(500), kind, VOCAB[kind])
    text = "the unbelievably quick runners jumped over dense retrievers"  # words the tokenizers never saw whole
    encoding = tokenizer(text)
    tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"])[1:-1]  # without [CLS], [SEP]
    starts = word_starts_of(encoding.word_ids())[1:-1]
    assert sum(starts) == len(text.split()) and len(tokens) > len(text.split())  # some words are several tokens
    for index, (token, start) in enumerate(zip(tokens, starts, strict=True)):
        if kind == "wordpiece":  # WordPiece marks a continuation
            assert start == (not token.startswith(marker)), tokens
        elif index > 0 or kind == "unigram":  # the others mark a start (byte-level BPE: not the text's first word)
            assert start == token.startswith(marker), tokens
    word_starts = torch.tensor(starts)[None].repeat(64, 1)  # (64, n): many draws of the same row
    selected = select_positions(torch.ones_like(word_starts), 0.5, generator(), word_starts)
    word = word_starts.long().cumsum(dim=1)  # (64, n): each token's word
    for row in range(64):
        for w in word[row].unique():
            chosen = selected[row][word[row] == w]
            assert chosen.all() or not chosen.any()
    assert 0.3 < selected.float().mean() < 0.7


def test_every_kind_of_tokenizer_is_reproducible():
    """WordPiece's trainer learned a different vocabulary on each run (5 of 5 differed within one process) until its
    continuation tokens were given ids in sorted order; they stay ordinary tokens, not special ones."""
    texts = make_sentences(300)
    for kind in KINDS:
        first, *others = (train_tokenizer(texts, kind, VOCAB[kind]).backend_tokenizer.to_str() for _ in range(3))
        assert all(other == first for other in others), kind
    tokenizer = train_tokenizer(texts, "wordpiece", VOCAB["wordpiece"])
    assert sorted(tokenizer.all_special_tokens) == sorted(BRACKET_TOKENS.values())
    assert "##e" in tokenizer.get_vocab() and "##e" not in tokenizer.tokenize("##e")  # text "##e" is not the token


def test_a_tokenizer_is_not_trained_from_a_one_pass_iterator():
    with pytest.raises(TypeError, match="re-iterable"):
        train_tokenizer(iter(make_sentences(10)), "wordpiece", VOCAB["wordpiece"])


# --- init-model, export and resume --------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture,tokenizer_model", [
    ("bert", "WordPiece"), ("roberta", "BPE"), ("xlm-roberta", "Unigram"), ("modernbert", "BPE"),
    ("deberta-v2", "Unigram")])
def test_init_model_trains_the_family_tokenizer_offline(tiny_corpus, tmp_path, architecture, tokenizer_model):
    output = tmp_path / architecture
    assert main(["init-model", "--architecture", architecture, "--corpus", str(tiny_corpus), "--vocab-size", "300",
                 "--hidden-size", "64", "--layers", "1", "--output", str(output)]) == 0
    model = AutoModelForMaskedLM.from_pretrained(output)
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert model.config.model_type == architecture and model.config.vocab_size == len(tokenizer)
    assert json.loads(tokenizer.backend_tokenizer.to_str())["model"]["type"] == tokenizer_model
    assert tokenizer.model_max_length == (8192 if architecture == "modernbert" else 512)
    assert backbone.position_limit(model.config) == tokenizer.model_max_length


def test_init_model_needs_a_tokenizer_or_a_corpus(tmp_path, capsys):
    assert main(["init-model", "--architecture", "modernbert", "--output", str(tmp_path / "m")]) == 2
    assert "--tokenizer: give either --tokenizer" in capsys.readouterr().err


@pytest.mark.parametrize("architecture,objective", matrix({
    ("roberta", "retromae"), ("xlm-roberta", "seed"), ("modernbert", "retromae"), ("modernbert", "contriever"),
    ("deberta-v2", "dupmae")}))
def test_family_runs_resume_identically_and_export_with_their_pooling(family_model_dirs, tiny_corpus, tmp_path,
                                                                      monkeypatch, architecture, objective):
    from retromae.pretraining.run import pretrain

    folder = family_model_dirs[architecture]
    pooling = OBJECTIVES[objective].pooling
    options = dict(objective=objective, max_steps=4, save_every=2, whole_word_mask=True,
                   **({"queue_size": 64} if objective == "contriever" else {}),  # the one objective reading it
                   contrastive_weight=1.0 if objective == "retromae+contrastive" else None)
    reference = run_metrics(pretrain(tiny_pretrain_config(folder, tiny_corpus, tmp_path / "full", **options)))
    interrupted = tmp_path / "interrupted"
    kill_after_checkpoint(monkeypatch, 2, lambda: pretrain(tiny_pretrain_config(folder, tiny_corpus, interrupted,
                                                                                **options)))
    resumed = run_metrics(pretrain(tiny_pretrain_config(folder, tiny_corpus, interrupted, resume=True, **options)))
    assert [m["loss"] for m in resumed] == pytest.approx([m["loss"] for m in reference], rel=1e-5)

    from sentence_transformers import SentenceTransformer

    encoder = AutoModel.from_pretrained(interrupted / "encoder").eval()
    tokenizer = AutoTokenizer.from_pretrained(interrupted / "encoder")
    texts = make_sentences(3, seed=5)
    inputs = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = encoder(**inputs).last_hidden_state  # (B, L, D)
    mask = inputs["attention_mask"][..., None].float()
    expected = hidden[:, 0] if pooling == "cls" else (hidden * mask).sum(1) / mask.sum(1)
    for folder_name in ("encoder", "sentence-transformer"):
        vectors = SentenceTransformer(str(interrupted / folder_name), device="cpu").encode(texts,
                                                                                           convert_to_tensor=True)
        torch.testing.assert_close(vectors, expected, rtol=1e-4, atol=1e-4)


# --- long inputs: enhanced decoding a block of rows at a time -----------------------------------------------------


def counting(decode_block, rows: list[int]):
    """`decode_block`, noting the rows of each block it decodes in `rows`."""
    def decode(query, *rest):
        rows.append(query.shape[1])
        return decode_block(query, *rest)
    return decode


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])  # absolute positions, rotary ones
def test_blockwise_enhanced_decoding_gives_the_whole_loss_and_gradients(family_tokenizers, monkeypatch,
                                                                         architecture):
    """With the mask drawn from the same counter-based scores, decoding 5 query rows at a time (recomputed in the
    backward pass) gives the loss and gradients of decoding every row at once."""
    import retromae.objectives.retromae as retromae_module
    from retromae.objectives.masking import draw_seeds, enhanced_decoding_mask_from_scores, hashed_uniform

    def hashed_mask(attention_mask, *, ratio, generator):  # the whole (B, L, L) mask, from the blockwise scores
        batch, length = attention_mask.shape
        scores = hashed_uniform(draw_seeds(batch, generator), 0, length, length)
        return enhanced_decoding_mask_from_scores(attention_mask, scores, ratio)

    monkeypatch.setattr(retromae_module, "enhanced_decoding_mask", hashed_mask)
    tokenizer = family_tokenizers[architecture]
    batch = make_batch(tokenizer)
    results = []
    for cells in (2**25, 4 * batch["input_ids"].shape[1] * 5):  # everything at once; blocks of 5 rows
        objective = build_objective("retromae", tiny_model(architecture, tokenizer), tokenizer, settings()).eval()
        objective.mask_cells = cells
        blocks = []
        objective._decode_block = counting(objective._decode_block, blocks)
        losses = objective(batch, generator(7))
        losses["loss"].backward()
        results.append((losses["decoder"], [p.grad.clone() for p in objective.decoder.parameters()]))
        assert sum(blocks) == (0 if cells == 2**25 else 2 * batch["input_ids"].shape[1])  # forward + recomputation
    (whole, whole_grads), (blocks, block_grads) = results
    torch.testing.assert_close(blocks, whole)
    for ours, theirs in zip(block_grads, whole_grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-6)


def test_the_architectures_options_name_every_architecture_the_registry_builds():
    from retromae.backbones import ARCHITECTURE_NAMES

    assert ARCHITECTURE_NAMES == FAMILIES


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("flash_attn") is None,
                    reason="needs a CUDA device and flash-attn")
@pytest.mark.parametrize("architecture", ["bert", "roberta", "modernbert"])
@pytest.mark.parametrize("name", ["retromae", "mlm", "condenser"])
def test_unpadded_flash_attention_gives_the_padded_losses(family_tokenizers, architecture, name):
    """FlashAttention-2 runs the padded batch unpadded (variable-length sequences): the same losses as padded SDPA."""
    tokenizer = family_tokenizers[architecture]
    batch = {key: value.cuda() for key, value in make_batch(tokenizer, count=8).items()}
    assert not batch["attention_mask"].all()  # sentences of different lengths: padding to leave out
    losses = {}
    for kernel in ("sdpa", "flash_attention_2"):
        objective = build_objective(name, tiny_model(architecture, tokenizer, attention=kernel), tokenizer,
                                    settings()).cuda().eval()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            losses[kernel] = objective(batch, torch.Generator("cuda").manual_seed(0))
    for key, value in losses["sdpa"].items():
        torch.testing.assert_close(losses["flash_attention_2"][key], value, rtol=2e-2, atol=2e-2)
