"""Round nine: cache entries built by processes at once, tokenizers in DataLoader workers."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader, Dataset

from retromae.data.workers import TOKENIZERS_SWITCH, started_workers


class Tokenised(Dataset):
    """Item i: the number of tokens of a batch of texts, tokenised in the worker."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> int:
        return sum(len(ids) for ids in self.tokenizer(["dense retrieval", "masked token"] * 8)["input_ids"])


@pytest.mark.parametrize("setting", [None, "true", "false"])
def test_workers_forked_after_parallel_tokenising_neither_hang_nor_warn(tiny_tokenizer, monkeypatch, capfd, setting):
    if setting is None:
        monkeypatch.delenv(TOKENIZERS_SWITCH, raising=False)
    else:
        monkeypatch.setenv(TOKENIZERS_SWITCH, setting)
    tiny_tokenizer(["the parent tokenises", "in parallel"] * 8)
    loader = DataLoader(Tokenised(tiny_tokenizer), batch_size=None, num_workers=1, timeout=20,
                        multiprocessing_context="fork")
    assert len(list(started_workers(loader))) == 2
    assert "tokenizers" not in capfd.readouterr().err
