import json
import shutil

import numpy as np
import pytest
import torch
from conftest import make_sentences

from retromae.models import encoder as encoder_module
from retromae.models.encoder import ENCODER_FILE, Encoder, PoolingConfig, describe_folder, pool
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.options import ConfigError

TEXTS = ["a short query", *make_sentences(9, seed=3), "the"]


@pytest.fixture(scope="module")
def plain(tiny_model_dir):
    return Encoder.load(tiny_model_dir, device="cpu")


def st_folder(tmp_path, tiny_model_dir, mode: str, normalize: bool):
    """A sentence-transformers folder saved by sentence-transformers itself (its current format)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(tiny_model_dir), max_seq_length=64)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=mode)]
    model = SentenceTransformer(modules=modules + ([Normalize()] if normalize else []), device="cpu")
    model.save(str(tmp_path / "st"))
    return tmp_path / "st", model


def legacy_st_folder(tmp_path, tiny_model_dir):
    """The older sentence-transformers layout: weights in 0_Transformer, boolean pooling keys, max_seq_length."""
    root = tmp_path / "legacy"
    (root / "1_Pooling").mkdir(parents=True)
    shutil.copytree(tiny_model_dir, root / "0_Transformer")
    (root / "0_Transformer" / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 16}))
    modules = [{"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
         "pooling_mode_max_tokens": False}))
    return root


def test_plain_folder_defaults_to_cls_and_pools_by_hand(plain, tiny_tokenizer):
    assert (plain.pooling, plain.normalize, plain.max_length) == ("cls", False, 128)
    batch = tiny_tokenizer(TEXTS[:3], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = plain.model(**batch).last_hidden_state  # (B, L, D)
    mask = batch["attention_mask"]
    for row in range(3):
        tokens = hidden[row, : int(mask[row].sum())]
        by_hand = {"cls": tokens[0], "mean": tokens.mean(0)}
        for mode, expected in by_hand.items():
            got = pool(hidden, mask, PoolingConfig(mode))[row]
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    normalized = pool(hidden, mask, PoolingConfig("mean", normalize=True))
    torch.testing.assert_close(normalized.norm(dim=-1), torch.ones(3))


def test_encode_shape_dtype_and_order_do_not_depend_on_length_sorting(plain):
    together = plain.encode(TEXTS, batch_size=4, show_progress=False)
    one_by_one = np.concatenate([plain.encode([text], batch_size=1, show_progress=False) for text in TEXTS])
    assert together.shape == (len(TEXTS), 32) and together.dtype == np.float32
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    assert plain.encode([], show_progress=False).shape == (0, 32)


def test_the_token_table_holds_each_text_s_ids_tokenised_a_chunk_at_a_time(plain, monkeypatch):
    """A corpus is tokenised TOKENIZE_CHUNK texts at a time into one int32 array (its token lists at once held about
    20 KB a text); the ids, the batches and so the vectors are those of one whole-corpus tokenisation."""
    whole = plain.encode(TEXTS, batch_size=4, show_progress=False)
    monkeypatch.setattr(encoder_module, "TOKENIZE_CHUNK", 3)
    ids, offsets = plain.token_table(TEXTS, 16)
    assert ids.dtype == np.int32 and offsets.shape == (len(TEXTS) + 1,) and offsets[-1] == len(ids)
    assert [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(len(TEXTS))] == plain.tokenize(TEXTS, 16)
    assert np.array_equal(plain.encode(TEXTS, batch_size=4, show_progress=False), whole)
    empty_ids, empty_offsets = plain.token_table([], 16)
    assert empty_ids.shape == (0,) and empty_offsets.tolist() == [0]


def test_auto_precision_on_a_cpu_is_bf16_where_the_rule_says_and_says_so(tiny_model_dir, monkeypatch, capsys):
    """`auto` follows `cpu_features.auto_bf16` (the suite fixes it to float32; 1 is a CPU with AMX): the vectors
    under bf16 autocast stay close to float32's, and the progress bar names the precision."""
    exact = Encoder.load(tiny_model_dir, device="cpu")
    monkeypatch.setenv("RETROMAE_CPU_BF16", "1")
    lower = Encoder.load(tiny_model_dir, device="cpu")
    assert exact.amp_dtype is None and lower.amp_dtype == torch.bfloat16
    assert Encoder.load(tiny_model_dir, device="cpu", dtype="float32").amp_dtype is None  # asked for: as asked
    vectors = lower.encode(TEXTS, description="encoding the test texts")
    assert "encoding the test texts in bf16" in capsys.readouterr().err
    expected = exact.encode(TEXTS, show_progress=False)
    cosine = (vectors * expected).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(expected, axis=1)
    assert vectors.dtype == np.float32 and cosine.min() > 0.99


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_encode_on_a_cpu_casts_and_packs_the_weights_per_call_unless_they_are_fixed(tiny_model_dir, dtype):
    """On a CPU `encode` runs on the weights cast (bf16) and packed (oneDNN) for the call: close to float32's
    vectors, the model's own weights left float32 for training, and the next call runs the weights as they are then
    (a fused AdamW changes them without telling); a searcher's encoder (`weights_fixed`) keeps them between calls."""
    def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    encoder = Encoder.load(tiny_model_dir, device="cpu", dtype=dtype)
    exact = Encoder.load(tiny_model_dir, device="cpu", dtype="float32")
    before = encoder.encode(TEXTS, show_progress=False)
    assert cosines(before, exact.encode(TEXTS, show_progress=False)).min() > 0.999
    assert {parameter.dtype for parameter in encoder.model.parameters()} == {torch.float32}
    optimizer = torch.optim.AdamW(encoder.model.parameters(), lr=0.5, fused=True)  # leaves version counters alone
    encoder.model.train()
    encoder.embed(*encoder.collate(encoder.tokenize(TEXTS))).sum().backward()
    optimizer.step()
    exact.model.load_state_dict(encoder.model.state_dict())
    after, expected = encoder.encode(TEXTS, show_progress=False), exact.encode(TEXTS, show_progress=False)
    assert cosines(after, expected).min() > 0.999 and cosines(before, expected).min() < 0.99
    encoder.weights_fixed = True
    encoder.encode(TEXTS, show_progress=False)
    linear = next(module for module in encoder.model.modules() if isinstance(module, torch.nn.Linear))
    with torch.no_grad():
        linear.weight.mul_(-1)  # a searcher's weights never change: the packed ones are kept
    np.testing.assert_allclose(encoder.encode(TEXTS, show_progress=False), after, atol=1e-6)


def test_prefix_and_max_length(plain):
    np.testing.assert_allclose(plain.encode(["x y"], prefix="query: ", show_progress=False),
                               plain.encode(["query: x y"], show_progress=False), atol=1e-6)
    assert max(len(ids) for ids in plain.tokenize(TEXTS, max_length=8)) == 8


def test_embed_keeps_gradients(plain):
    input_ids, attention_mask = plain.collate(plain.tokenize(TEXTS[:2]))
    vectors = plain.embed(input_ids, attention_mask)  # (2, D)
    assert vectors.shape == (2, 32) and vectors.requires_grad


def test_our_export_round_trip(tmp_path, tiny_model_dir):
    encoder = Encoder.load(tiny_model_dir, pooling="mean", normalize=True, device="cpu")
    encoder.save(tmp_path / "ours")
    assert json.loads((tmp_path / "ours" / ENCODER_FILE).read_text())["pooling"] == "mean"
    loaded = Encoder.load(tmp_path / "ours", device="cpu")
    assert (loaded.pooling, loaded.normalize) == ("mean", True)
    np.testing.assert_allclose(loaded.encode(TEXTS, show_progress=False), encoder.encode(TEXTS, show_progress=False),
                               atol=1e-6)


@pytest.mark.parametrize(("mode", "normalize"), [("cls", True), ("mean", False)])
def test_sentence_transformers_folder_matches_sentence_transformers(tmp_path, tiny_model_dir, mode, normalize):
    """Without a Normalize module, sentence-transformers saves the folder compared by cosine (its default
    `similarity_fn_name`): its vectors are read normalised, so that their inner product is that cosine."""
    folder, model = st_folder(tmp_path, tiny_model_dir, mode, normalize)
    encoder = Encoder.load(folder, device="cpu")
    assert (encoder.pooling, encoder.normalize, encoder.max_length) == (mode, True, 64)
    theirs = model.encode(TEXTS)
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    np.testing.assert_allclose(encoder.encode(TEXTS, show_progress=False), theirs, atol=1e-5)


def test_legacy_sentence_transformers_folder_and_overrides(tmp_path, tiny_model_dir):
    folder = legacy_st_folder(tmp_path, tiny_model_dir)
    encoder = Encoder.load(folder, device="cpu")
    assert (encoder.pooling, encoder.normalize, encoder.max_length) == ("mean", False, 16)
    overridden = Encoder.load(folder, pooling="cls", normalize=True, device="cpu")
    assert (overridden.pooling, overridden.normalize) == ("cls", True)


def test_a_hub_repositorys_json_files_are_read_as_hostile_files(tmp_path, monkeypatch):
    """The files a hub name brings (through the Hugging Face cache) are checked as a local folder's are."""
    from huggingface_hub.errors import EntryNotFoundError

    cache = tmp_path / "cache"
    cache.mkdir()

    def download(repo: str, filename: str) -> str:
        if not (cache / filename).is_file():
            raise EntryNotFoundError(f"{repo} has no {filename}")
        return str(cache / filename)

    monkeypatch.setattr(encoder_module, "hf_hub_download", download)
    (cache / ENCODER_FILE).write_text(json.dumps({"pooling": "mean", "normalize": True, "max_length": 64}))
    spec = describe_folder("org/model")
    assert (spec.pooling, spec.max_length) == (PoolingConfig("mean", True), 64)
    (cache / ENCODER_FILE).write_text('{"pooling": "mean", "max_length": NaN}')
    with pytest.raises(ModelLoadError, match=f"{ENCODER_FILE}: the number NaN is not finite"):
        describe_folder("org/model")
    (cache / ENCODER_FILE).unlink()
    assert not describe_folder("org/model").declared  # neither our file nor modules.json: a plain model


def test_load_errors(tmp_path, tiny_model_dir):
    with pytest.raises(ModelLoadError, match="no-such-model"):
        Encoder.load(tmp_path / "no-such-model")
    with pytest.raises(ConfigError, match="--pooling"):
        Encoder.load(tiny_model_dir, pooling="max")
    folder = legacy_st_folder(tmp_path, tiny_model_dir)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(ModelLoadError, match="not supported"):
        Encoder.load(folder)
    (folder / "modules.json").write_text("[{")
    with pytest.raises(ModelLoadError, match="modules.json: not valid JSON"):
        Encoder.load(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="empty"):
        Encoder.load(empty)
