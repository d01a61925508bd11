"""Round nine: cache entries built by processes at once, tokenizers in DataLoader workers."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import make_sentences
from torch.utils.data import DataLoader, Dataset

from retromae.data.workers import TOKENIZERS_SWITCH, started_workers
from retromae.runtime.cache_entries import cached_folder, clear_debris, private_folder
from retromae.runtime.errors import DataError

AGAIN = "built again"


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


def _folders(cache: Path) -> list[str]:
    return sorted(item.name for item in cache.iterdir())


def _loader(path: Path) -> str:
    """The entry's content; DataError for an entry without it (damaged)."""
    if not (path / "value").is_file():
        raise DataError(f"{path / 'value'}: missing")
    return (path / "value").read_text()


def _writer(value: str):
    def build(folder: Path) -> None:
        (folder / "value").write_text(value)
    return build


def test_a_builder_that_loses_the_race_uses_the_winner_s_entry_and_drops_its_own(tmp_path):
    """The winner renames its folder into place while we build: our rename is refused (ENOTEMPTY before), theirs
    is loaded, ours removed; the entry is never seen half built."""
    path = tmp_path / "entry"

    def build(folder: Path) -> None:
        (folder / "value").write_text("ours")
        assert not path.exists()
        cached_folder(path, _writer("theirs"), _loader, AGAIN)

    assert cached_folder(path, build, _loader, AGAIN) == "theirs"
    assert _folders(tmp_path) == ["entry"] and _loader(path) == "theirs"


def test_a_damaged_entry_is_built_again_with_a_note(tmp_path, capfd):
    path = tmp_path / "entry"
    path.mkdir()
    assert cached_folder(path, _writer("built"), _loader, AGAIN) == "built"
    assert capfd.readouterr().err == f"retromae: note: {path / 'value'}: missing; {AGAIN}\n"
    assert _folders(tmp_path) == ["entry"]


def test_a_killed_builder_leaves_a_folder_no_one_reads_and_the_next_builder_removes(tmp_path):
    path = tmp_path / "entry"
    child = os.fork()
    if child == 0:  # a builder killed while building
        try:
            cached_folder(path, lambda folder: (folder / "half").touch() or time.sleep(60), _loader, AGAIN)
        finally:
            os._exit(0)
    while not any(item.name.endswith(".tmp") for item in tmp_path.iterdir()):
        time.sleep(0.01)
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    assert not path.exists()
    with private_folder(tmp_path / "other") as live:  # a live builder's folder stays
        assert cached_folder(path, _writer("built"), _loader, AGAIN) == "built"
        assert _folders(tmp_path) == sorted(["entry", live.name])
    assert _folders(tmp_path) == ["entry"]


def test_debris_of_another_host_stays(tmp_path):
    (tmp_path / ".entry.pid1@another-host.abc.tmp").mkdir()
    clear_debris(tmp_path)
    assert _folders(tmp_path) == [".entry.pid1@another-host.abc.tmp"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": text}) + "\n"
                            for i, text in enumerate(make_sentences(40))), encoding="utf-8")
    return path


def test_token_stores_built_at_once_are_one_store(tiny_tokenizer, corpus, tmp_path, monkeypatch):
    """A second process tokenises the same corpus while we do and renames its store first: ours is dropped, theirs
    (checked) is the one returned, and the cache holds it alone."""
    from retromae.data import token_store
    from retromae.data.token_store import TokenStore

    build = token_store._build

    def racing(directory, *args):
        monkeypatch.setattr(token_store, "_build", build)
        TokenStore.build_or_load(corpus, tiny_tokenizer, 32, cache_dir=tmp_path, show_progress=False)
        return build(directory, *args)

    monkeypatch.setattr(token_store, "_build", racing)
    store = TokenStore.build_or_load(corpus, tiny_tokenizer, 32, cache_dir=tmp_path, show_progress=False)
    assert len(store) > 0 and _folders(tmp_path / "token_stores") == [store.path.name]


def test_token_stores_built_by_processes_at_once(tiny_tokenizer, corpus, tmp_path, monkeypatch):
    """Three processes started together on an empty cache, three times: each gets the store (before: one in 60
    failed, reading a store another had moved away: 'word_starts.uint8: missing from the token store')."""
    from retromae.data.token_store import TokenStore

    monkeypatch.setenv(TOKENIZERS_SWITCH, "false")  # forked after the parent's tokenising
    for round_ in range(3):
        cache = tmp_path / str(round_)
        children = []
        for _ in range(3):
            child = os.fork()
            if child == 0:
                code = 1
                try:
                    store = TokenStore.build_or_load(corpus, tiny_tokenizer, 32, cache_dir=cache, show_progress=False)
                    code = 0 if len(store) else 1
                finally:
                    os._exit(code)
            children.append(child)
        assert all(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0 for child in children)
        assert len(_folders(cache / "token_stores")) == 1


def test_an_export_made_meanwhile_by_another_process_is_used_and_ours_dropped(tmp_path, monkeypatch):
    """Two exports of the same weights at once: the one moved into place first, with its record, is the one both
    use; the other's file never replaces it (before: each replaced the file, then rewrote the shared record)."""
    from retromae.models import backends

    def exported(text: str):
        def export(model, path: Path) -> None:
            path.write_text(text)
        return export

    def racing(model, path: Path) -> None:
        monkeypatch.setattr(backends, "export_onnx", exported("theirs"))
        backends.ensure_export(model, tmp_path, "weights", "onnx", "none")
        path.write_text("ours")

    monkeypatch.setattr(backends, "export_onnx", racing)
    made = len(backends._MADE)
    path = backends.ensure_export(None, tmp_path, "weights", "onnx", "none")
    assert path.read_text() == "theirs" and backends._MADE[made:] == [path]
    assert sorted(item.name for item in path.parent.iterdir()) == [".retromae-entries.lock", "model.onnx",
                                                                    backends.EXPORT_RECORD]
    assert backends._fresh(path, "weights")
