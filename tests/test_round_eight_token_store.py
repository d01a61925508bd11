"""Round eight of the hostile-input audit, section 3: the token store found in the cache is checked before it is used.

`$RETROMAE_CACHE/token_stores/<key>/` is shared and its key is a hash anyone holding the corpus and the tokenizer can
compute; it was reused whenever its meta.json was a file. Its arrays edited in place trained without a word (ids all
7: exit 0, another loss), ids beyond the vocabulary, an empty array or a count of meta.json that is text ended in
tracebacks. `data.token_store.TokenStore.__init__` now opens a store checked (`read_meta`, `open_arrays`, each array's
fingerprint recorded in meta.json when the store is written, `check_blocks`), and `TokenStore.build_or_load`, through
which `pretrain`, `quickstart` and `adapt` find their stores, tokenises again over one that fails, with one note line
naming the file and what is wrong.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import make_sentences
from test_own_files import KINDS, deadline, described, plant

from retromae.cli import main
from retromae.data.token_store import FILES, TokenStore, id_limit
from retromae.runtime.errors import DataError
from retromae.runtime.run_folder import file_fingerprint

AGAIN = "; tokenising the corpus again (the token store is a cache)\n"
MAX_LENGTH = 16


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_tokenizer) -> dict[str, Path]:
    """A corpus, the cache its store was built in, and a copy of the store as it was built ("pristine")."""
    base = tmp_path_factory.mktemp("store")
    corpus = base / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(make_sentences(4, seed=i))}) + "\n" for i in range(40)))
    store = TokenStore.build_or_load([corpus], tiny_tokenizer, MAX_LENGTH, cache_dir=base / "cache",
                                     show_progress=False)
    shutil.copytree(store.path, base / "pristine")
    return {"corpus": corpus, "cache": base / "cache", "store": store.path, "pristine": base / "pristine"}


@pytest.fixture()
def store(built) -> Path:
    """The built store's folder, as it was built."""
    shutil.rmtree(built["store"])
    shutil.copytree(built["pristine"], built["store"])
    return built["store"]


def edit(store: Path, key: str, change: Callable[[np.ndarray], None], forge: bool = False) -> None:
    """Change the array `key` of `store` in place; with `forge`, meta.json's fingerprint of it too (a store written
    whole by someone else, or by a writer's bug: only the checks of its blocks find it)."""
    name, dtype = FILES[key]
    array = np.memmap(store / name, dtype=dtype, mode="r+")
    change(array)
    array.flush()
    del array
    if forge:
        edit_meta(store, lambda meta: meta["fingerprints"].update({name: file_fingerprint(store / name)}))


def edit_meta(store: Path, change: Callable[[dict], object]) -> None:
    meta = json.loads((store / "meta.json").read_text())
    change(meta)
    (store / "meta.json").write_text(json.dumps(meta))


def truncate(path: Path, size: int) -> None:
    with path.open("r+b") as handle:
        handle.truncate(size)


def set_item(index: int | slice, value: int) -> Callable[[np.ndarray], None]:
    return lambda array: array.__setitem__(index, value)


# case: (damage done to the store folder, the file named, the start of what the note says is wrong)
DAMAGE: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "ids edited in place (same size)": (lambda s: edit(s, "ids", set_item(slice(None), 7)), "ids.int32",
                                        "changed since the store was written"),
    "an offset edited in place": (lambda s: edit(s, "offsets", set_item(5, 10**12)), "block_offsets.int64",
                                  "changed since the store was written"),
    "word starts edited in place": (lambda s: edit(s, "word_starts", set_item(slice(None), 1)), "word_starts.uint8",
                                    "changed since the store was written"),
    "ids empty": (lambda s: truncate(s / "ids.int32", 0), "ids.int32", "holds 0 bytes, not the "),
    "ids one entry short": (lambda s: truncate(s / "ids.int32", (s / "ids.int32").stat().st_size - 4), "ids.int32",
                            "holds "),
    "block_documents missing": (lambda s: (s / "block_documents.int32").unlink(), "block_documents.int32",
                                "missing from the token store"),
    "num_tokens a text": (lambda s: edit_meta(s, lambda m: m.update(num_tokens="abc")), "meta.json",
                          "field 'num_tokens' is 'abc'; it must be a whole number and must be positive"),
    "num_blocks 3.0": (lambda s: edit_meta(s, lambda m: m.update(num_blocks=3.0)), "meta.json",
                       "field 'num_blocks' is 3.0; it must be a whole number"),
    "num_documents missing": (lambda s: edit_meta(s, lambda m: m.pop("num_documents")), "meta.json",
                              "missing field 'num_documents'"),
    "no fingerprints (an older store's meta.json)": (lambda s: edit_meta(s, lambda m: m.pop("fingerprints")),
                                                     "meta.json", "field 'fingerprints' is None, not the fingerprint"),
    "sources not texts": (lambda s: edit_meta(s, lambda m: m.update(sources=[1])), "meta.json",
                          "field 'sources' is [1], not a list of texts"),
    "another format version": (lambda s: edit_meta(s, lambda m: m.update(format_version=2)), "meta.json",
                               "format version 2, not 3: written by another version of retromae"),
    "meta.json not JSON": (lambda s: (s / "meta.json").write_text("{"), "meta.json", "not valid JSON"),
    "forged: ids beyond the vocabulary": (lambda s: edit(s, "ids", set_item(slice(None, None, 3), 5000), forge=True),
                                          "ids.int32", "token 0 has the id 5000, not below meta.json's vocab_size"),
    "forged: a negative id": (lambda s: edit(s, "ids", set_item(3, -1), forge=True), "ids.int32",
                              "token 3 has the id -1, not below meta.json's vocab_size"),
    "forged: offsets decreasing": (lambda s: edit(s, "offsets", set_item(5, 10**12), forge=True),
                                   "block_offsets.int64", "block 4 holds 99999"),
    "forged: offsets not from 0": (lambda s: edit(s, "offsets", set_item(0, 1), forge=True), "block_offsets.int64",
                                   "starts at 1, not 0"),
    "forged: offsets not to num_tokens": (lambda s: edit(s, "offsets", lambda a: a.__setitem__(-1, a[-1] - 1),
                                                         forge=True), "block_offsets.int64",
                                          "ends at "),
    "forged: a block's document beyond": (lambda s: edit(s, "documents", set_item(3, 10**9), forge=True),
                                          "block_documents.int32", "block 3 is of document 1000000000, after a block"),
    "forged: documents not from 0": (lambda s: edit(s, "documents", set_item(0, 1), forge=True),
                                     "block_documents.int32", "its first block is of document 1, not 0"),
    "forged: the last block's document beyond": (lambda s: edit(s, "documents", lambda a: a.__setitem__(-1, a[-1] + 1),
                                                                forge=True), "block_documents.int32",
                                                 "its last block is of document "),
}
# meta.json of another store (copied under this key): found by `build_or_load` only, which knows the store it wants
ANOTHER_STORE = {
    "another key": (lambda s: edit_meta(s, lambda m: m.update(cache_key="0" * 64)), "meta.json",
                    f"records cache_key '{'0' * 64}', where this corpus, tokenizer and max_length make "),
    "another vocabulary": (lambda s: edit_meta(s, lambda m: m.update(vocab_size=5000)), "meta.json",
                           "records vocab_size 5000, where this corpus, tokenizer and max_length make "),
    "another max_length": (lambda s: edit_meta(s, lambda m: m.update(max_length=32, block_tokens=30)), "meta.json",
                           "records max_length 32, where this corpus, tokenizer and max_length make 16"),
}


def rebuilt(built: dict[str, Path], tokenizer, capsys, named: Path, wrong: str) -> TokenStore:
    """`build_or_load` over the damaged store: one note naming `named` and what is `wrong`, then the store as built."""
    store = TokenStore.build_or_load([built["corpus"]], tokenizer, MAX_LENGTH, cache_dir=built["cache"],
                                     show_progress=False)
    note = capsys.readouterr().err
    assert note.startswith(f"retromae: note: {named}: {wrong}") and note.endswith(AGAIN) and note.count("\n") == 1, \
        note
    assert store.path == built["store"]
    for name in [name for name, _ in FILES.values()] + ["meta.json"]:
        assert (store.path / name).read_bytes() == (built["pristine"] / name).read_bytes(), name
    return store


@pytest.mark.parametrize("case", list(DAMAGE) + list(ANOTHER_STORE))
def test_a_damaged_token_store_is_refused_when_opened_and_built_again_from_the_cache(case, built, store,
                                                                                     tiny_tokenizer, capsys):
    damage, name, wrong = {**DAMAGE, **ANOTHER_STORE}[case]
    damage(store)
    if case in DAMAGE:  # a library caller opening the folder: one error naming the file (before: tracebacks, or used)
        with pytest.raises(DataError) as error:
            TokenStore(store)
        assert str(error.value).startswith(f"{store / name}: {wrong}"), str(error.value)
    rebuilt(built, tiny_tokenizer, capsys, store / name, wrong)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", ["ids.int32", "meta.json"])
def test_a_token_store_file_that_is_not_a_regular_file_is_never_read_and_is_built_again(name, kind, built, store,
                                                                                         tmp_path, tiny_tokenizer,
                                                                                         capsys):
    elsewhere = tmp_path / "elsewhere"  # where a link points: a file holding the store's own bytes, or nothing
    elsewhere.mkdir()
    shutil.copy(built["pristine"] / name, elsewhere / "precious.txt")
    path = store / name
    plant(kind, path, elsewhere)
    with deadline(path):
        rebuilt(built, tiny_tokenizer, capsys, path, f"is {described(kind, path)}, not a regular file")
    assert [p.name for p in elsewhere.iterdir()] == ["precious.txt"]
    assert (elsewhere / "precious.txt").read_bytes() == (built["pristine"] / name).read_bytes()


def test_a_store_records_its_fingerprints_and_is_hashed_once_per_process(built, store, tiny_tokenizer, monkeypatch):
    import hashlib

    calls = []
    real = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *data: calls.append(data) or real(*data))
    TokenStore(store)
    TokenStore.build_or_load([built["corpus"]], tiny_tokenizer, MAX_LENGTH, cache_dir=built["cache"],
                             show_progress=False)
    assert calls.count(()) == len(FILES)  # each array once, by the first opening in this process
    meta = json.loads((store / "meta.json").read_text())
    assert meta["vocab_size"] == id_limit(tiny_tokenizer) and meta["format_version"] == 3
    assert meta["fingerprints"] == {name: file_fingerprint(store / name) for name, _ in FILES.values()}


def test_pretrain_trains_on_the_store_built_again_not_on_the_damaged_one(tiny_model_dir, tiny_corpus, tmp_path,
                                                                         capsys):
    from retromae.models.pretrained import load_tokenizer

    cache = tmp_path / "cache"
    store = TokenStore.build_or_load([tiny_corpus], load_tokenizer(str(tiny_model_dir)), 32, cache_dir=cache,
                                     show_progress=False).path
    ids = (store / "ids.int32").read_bytes()
    edit(store, "ids", set_item(slice(None), 7))  # the audit's case a: trained on, exit 0, before
    assert main(["pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus), "--max-steps", "1",
                 "--batch-size", "4", "--max-length", "32", "--save-every", "0", "--cache-dir", str(cache),
                 "--output", str(tmp_path / "run")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("retromae: note:")]
    assert notes == [f"retromae: note: {store / 'ids.int32'}: changed since the store was written (its content is "
                     f"not the one the fingerprint in meta.json records){AGAIN.strip()}"]
    assert (store / "ids.int32").read_bytes() == ids
