"""Two-view data for the contrastive objectives: spans of one document, given pairs, their collation and errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_sentences, shared_data

from retromae.data import TokenStore
from retromae.data.batch_sampler import ResumableBatchSampler
from retromae.data.contrastive import SUBSPAN_SHARE, PairCollator, PairsDataset, SpanPairDataset
from retromae.runtime.errors import DataError


def plain_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture()
def store(tmp_path, tiny_tokenizer) -> TokenStore:
    """Documents of 1 to 6 sentences cut into blocks of at most 14 tokens: one-block and many-block documents."""
    corpus = tmp_path / "corpus.jsonl"
    texts = [" ".join(make_sentences(1 + i % 6, seed=i))[: 20 + 40 * (i % 6)] for i in range(24)]
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    return TokenStore.build_or_load([corpus], tiny_tokenizer, 16, cache_dir=tmp_path / "cache", show_progress=False)


def document_blocks(store: TokenStore, document: int) -> list[list[int]]:
    return [store.block(i)[0].tolist() for i in range(len(store)) if store.block_document(i) == document]


def is_sub_list(part: list[int], whole: list[int]) -> bool:
    return any(whole[i:i + len(part)] == part for i in range(len(whole) - len(part) + 1))


def test_document_block_offsets_agree_with_block_documents(store):
    offsets = store.document_block_offsets()
    assert offsets[0] == 0 and offsets[-1] == len(store) and len(offsets) == store.num_documents + 1
    for document in range(store.num_documents):
        assert {store.block_document(i) for i in range(offsets[document], offsets[document + 1])} == {document}


def test_spans_come_from_one_document(store):
    dataset = SpanPairDataset(store, seed=0)
    assert len(dataset) == store.num_documents
    kinds = set()
    for document, (first, second) in enumerate(dataset.__getitems__(list(range(len(dataset))))):
        blocks = document_blocks(store, document)
        if len(blocks) > 1:  # two distinct whole blocks of the document
            kinds.add("blocks")
            assert first[0].tolist() in blocks and second[0].tolist() in blocks
            assert blocks.index(first[0].tolist()) != blocks.index(second[0].tolist())
        else:  # two crops of 25-50% of the only block, each starting a word
            kinds.add("crops")
            low, high = (np.ceil(share * len(blocks[0])) for share in SUBSPAN_SHARE)
            for ids, starts in (first, second):
                assert is_sub_list(ids.tolist(), blocks[0]) and starts[0] and low <= len(ids) <= high
    assert kinds == {"blocks", "crops"}


def test_span_draws_follow_the_seed_and_the_batch(store):
    dataset = SpanPairDataset(store, seed=0)

    def views(items):
        return [[view[0].tolist() for view in pair] for pair in items]

    assert views(dataset.__getitems__([3, 5, 7])) == views(SpanPairDataset(store, seed=0).__getitems__([3, 5, 7]))
    assert views([dataset[5]]) == views(dataset.__getitems__([5]))
    in_other_batches = [views(dataset.__getitems__([d, other]))[0] for d in range(12) for other in (20, 21)]
    assert in_other_batches[0::2] != in_other_batches[1::2]  # a document in another batch gets other spans
    assert views(SpanPairDataset(store, seed=1).__getitems__([3, 5, 7])) != views(dataset.__getitems__([3, 5, 7]))


def test_loader_batches_hold_each_document_once_in_pair_layout(store, tiny_tokenizer):
    dataset = SpanPairDataset(store, seed=0)
    sampler = ResumableBatchSampler(len(dataset), batch_size=4, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=PairCollator(tiny_tokenizer))
    indices, batch = next(iter(sampler)), next(iter(loader))
    assert len(set(indices)) == 4 and batch["input_ids"].shape[0] == 8
    for row, document in enumerate(indices):
        text = " ".join(" ".join(map(str, block)) for block in document_blocks(store, document))
        for view_row in (row, row + 4):  # first view, then its positive four rows down
            ids = batch["input_ids"][view_row][batch["special_tokens_mask"][view_row] == 0].tolist()
            assert " ".join(map(str, ids)) in text


def write_pairs(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def test_pairs_dataset_tokenises_and_draws_one_positive(tmp_path, tiny_tokenizer):
    long_text = " ".join(make_sentences(6, seed=1))
    path = write_pairs(tmp_path / "pairs.jsonl", [
        {"query": "dense retrieval", "pos": "the encoder learns", "neg": ["ignored"]},
        {"query": "protein cell", "pos": ["gene study", "patients treatment"]},
        {"query": long_text, "pos": [long_text]},
    ])
    dataset = PairsDataset(path, tiny_tokenizer, max_length=16, seed=0)
    assert len(dataset) == 3
    query, positive = dataset[0]
    assert query[0].tolist() == plain_ids(tiny_tokenizer, "dense retrieval")
    assert positive[0].tolist() == plain_ids(tiny_tokenizer, "the encoder learns")
    assert len(dataset[2][0][0]) == 14  # cut to max_length minus [CLS] and [SEP]
    drawn = {tuple(dataset.__getitems__([1] * n)[-1][1][0].tolist()) for n in range(1, 20)}
    assert drawn == {tuple(plain_ids(tiny_tokenizer, t)) for t in ("gene study", "patients treatment")}
    batch = PairCollator(tiny_tokenizer)(dataset.__getitems__([0, 1]))
    for row, text in ((0, "dense retrieval"), (2, "the encoder learns")):  # rows: 2 queries, then 2 positives
        expected = plain_ids(tiny_tokenizer, text)
        assert batch["input_ids"][row, 1:1 + len(expected)].tolist() == expected


@pytest.mark.parametrize("line,message", [
    ('{"query": "a", "pos": ', "malformed JSON"),
    ('{"query": "a"}', "missing field 'pos'; a pair is a JSON object"),
    ('["a", "b"]', "fields 'query' and 'pos'"),
    ('{"query": "", "pos": "b"}', "'query' must be a non-empty string"),
    ('{"query": "a", "pos": []}', "'pos' must be a string or a non-empty list"),
    ('{"query": "a", "pos": ["b", 3]}', "every entry of 'pos'"),
])
def test_bad_pair_lines_name_file_and_line(tmp_path, tiny_tokenizer, line, message):
    path = write_pairs(tmp_path / "pairs.jsonl", [{"query": "a", "pos": "b"}, line])
    with pytest.raises(DataError, match=f"pairs.jsonl:2: .*{message}"):
        PairsDataset(path, tiny_tokenizer, 16, seed=0)


def test_missing_or_empty_pairs_file(tmp_path, tiny_tokenizer):
    with pytest.raises(DataError, match="no such pairs file"):
        PairsDataset(tmp_path / "none.jsonl", tiny_tokenizer, 16, seed=0)
    with pytest.raises(DataError, match="no pairs"):
        PairsDataset(write_pairs(tmp_path / "empty.jsonl", []), tiny_tokenizer, 16, seed=0)


def test_snli_pairs_load(tiny_tokenizer):
    dataset = PairsDataset(shared_data("pairs/snli-dev-test.jsonl"), tiny_tokenizer, 64, seed=0)
    assert len(dataset) == 6162 and all(len(group[1]) >= 1 for group in dataset.groups)
