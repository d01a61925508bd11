"""Round ten: round nine's small leftovers, each at its rule's home.

A lone surrogate quoted once (`runtime.lines.quoted`); NSG's build weighed with faiss's NN-descent
(`retrieval.faiss_options.graph_part`); the search settings an index.faiss stores held to --params' bounds
(`retrieval.index._check_stored_settings`); vocabulary-loss.json recorded under its folder's lock
(`losses.vocabulary_choice.record_timings`); the old `.KEY.XXXXXXXX.tmp` leftovers cleared when no process holds them
(`runtime.cache_entries.clear_debris`); YAML merge keys refused (`runtime.options._ConfigLoader`); digits read as
[0-9] by every regex in src, and a factory string ASCII (`faiss_options.check_factory`); metric keys read to one
form (`evaluation.metric_registry.canonical_key`).
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import error_line

from retromae.cli import main
from retromae.evaluation.config import EvaluateConfig
from retromae.evaluation.metric_registry import canonical_key
from retromae.losses.vocabulary_choice import read_cache, record_timings
from retromae.retrieval.faiss_options import NSG_DESCENT_BYTES, memory_parts
from retromae.retrieval.index import build_index, load_index, save_index
from retromae.runtime.cache_entries import _temporary_folder, clear_debris
from retromae.runtime.errors import DataError, printable
from retromae.runtime.lines import integer_field, quoted
from retromae.runtime.options import ConfigError, load_config_file

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.mark.parametrize("byte", range(0x80, 0x100))
def test_a_byte_that_is_not_utf8_is_quoted_once_and_reads_back(byte):
    value = b"id\xff".replace(b"\xff", bytes([byte])).decode("utf-8", "surrogateescape")
    shown = quoted(value)
    assert shown == f"'id\\udc{byte:02x}'" and ast.literal_eval(shown) == value
    assert os.fsencode(ast.literal_eval(shown)) == b"id" + bytes([byte]) and printable(shown) == shown


def test_a_data_files_number_field_quotes_its_surrogate_once():
    with pytest.raises(DataError) as refused:
        integer_field(Path("q.tsv"), 3, "1\udcff", "score")
    assert "'1\\udcff'" in str(refused.value) and "\\\\" not in str(refused.value)


# faiss 1.15.1's peak while adding (VmHWM), its copy of the vectors aside: (vectors, dimension, R) → bytes
NSG_MEASURED = {(2000, 64, 16): 6_090_752, (2000, 384, 64): 5_787_648, (5000, 64, 16): 13_146_112,
                (5000, 384, 64): 12_926_976, (10000, 64, 64): 25_591_808, (10000, 384, 16): 24_813_568,
                (50000, 64, 16): 116_654_080}


@pytest.mark.parametrize(("rows", "dimension", "r"), list(NSG_MEASURED))
def test_the_nsg_estimate_is_within_a_quarter_of_faiss_s_peak(rows, dimension, r):
    (_, size, _), = memory_parts(f"NSG{r},Flat", rows, rows, dimension)
    assert 0.75 <= size / NSG_MEASURED[rows, dimension, r] <= 1.25


def test_a_wide_nsg_is_weighed_by_its_pruning_past_nn_descent():
    (_, size, _), = memory_parts("NSG512,Flat", 1000, 1000, 64)
    assert size == 1000 * (8 * 64 + 12 * 512 + 44) > 1000 * NSG_DESCENT_BYTES


# factory, how a hostile file sets a stored setting, the setting named
HOSTILE = {
    "HNSW8,Flat": (lambda index: setattr(index.hnsw, "efSearch", 1 << 30), "efSearch=1073741824"),
    "NSG8,Flat": (lambda index: setattr(index.nsg, "search_L", 1 << 30), "search_L=1073741824"),
    "IVF4,Flat": (lambda index: setattr(index, "nprobe", 1 << 30), "nprobe=1073741824"),
    "IVF4_HNSW8,Flat": (lambda index: setattr(faiss_downcast(index.quantizer).hnsw, "efSearch", 0), "efSearch=0"),
    "PQ4": (lambda index: setattr(index, "polysemous_ht", 1 << 30), "polysemous_ht=1073741824"),
    "RQ2x4": (lambda index: setattr(index.rq, "max_beam_size", 1 << 20), "max_beam_size=1048576"),
    "IVF4,Flat,RFlat": (lambda index: setattr(faiss_downcast(index.base_index), "nprobe", 0), "nprobe=0"),
}


def faiss_downcast(index):
    import faiss
    return faiss.downcast_index(index)


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)


@pytest.mark.parametrize("factory", list(HOSTILE))
def test_a_stored_search_setting_beyond_what_params_takes_is_refused_naming_the_file(factory, vectors, tmp_path):
    pytest.importorskip("faiss")
    index = build_index(vectors, factory, metric="l2")
    save_index(index, tmp_path / "fine", [str(row) for row in range(len(vectors))], {"factory": factory})
    load_index(tmp_path / "fine")
    make_hostile, named = HOSTILE[factory]
    make_hostile(faiss_downcast(index))
    save_index(index, tmp_path / "bad", [str(row) for row in range(len(vectors))], {"factory": factory})
    with pytest.raises(DataError) as refused:
        load_index(tmp_path / "bad")
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'bad' / 'index.faiss'}: a search setting it stores is out of bounds: "
                              f"{named}: must be ") and "\n" not in message, message


def test_a_stored_setting_is_refused_by_the_search_command_in_one_line(vectors, tmp_path, capsys):
    pytest.importorskip("faiss")
    index = build_index(vectors, "HNSW8,Flat")
    index.hnsw.efSearch = 1 << 30
    save_index(index, tmp_path / "ix", [str(row) for row in range(len(vectors))], {"factory": "HNSW8,Flat"})
    code = main(["search", "--index", str(tmp_path / "ix"), "--query", "apple"])
    assert code == 2 and "index.faiss: a search setting it stores is out of bounds: efSearch=" in error_line(capsys)


def _record(path: str, key: str) -> None:
    record_timings(Path(path), key, {"unfused": 1.0})


def test_processes_recording_timings_at_once_each_keep_theirs(tmp_path):
    path = tmp_path / "cache" / "vocabulary-loss.json"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_record, args=(str(path), f"key{number}")) for number in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(read_cache(path)) == [f"key{number}" for number in range(8)]


OLD_NAME = f".{'ab' * 32}.k3_x9q0z.tmp"


def old_leftover(folder: Path, name: str = OLD_NAME, idle: bool = True) -> Path:
    """A token store's temporary folder of the naming before round nine, holding an array, unchanged for two hours
    (`idle`) or just written."""
    (folder / name).mkdir()
    (folder / name / "ids.int32").write_bytes(b"\0" * 8)
    if idle:
        for path in (folder / name / "ids.int32", folder / name):
            os.utime(path, (time.time() - 7200,) * 2)
    return folder / name


def test_an_old_leftover_no_process_holds_is_cleared_and_what_is_not_ours_stays(tmp_path):
    old_leftover(tmp_path)
    kept = [f".{'ab' * 31}.k3_x9q0z.tmp", f".{'AB' * 32}.k3_x9q0z.tmp", f".{'ab' * 32}.k3_x9q0.tmp", "mine.tmp"]
    for name in kept:
        old_leftover(tmp_path, name)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f".{'cd' * 32}.k3_x9q0z.tmp").symlink_to(tmp_path / "elsewhere")
    (tmp_path / f".{'ef' * 32}.k3_x9q0z.tmp").write_text("a file")
    clear_debris(tmp_path)
    assert not (tmp_path / OLD_NAME).exists()
    assert all((tmp_path / name).is_dir() for name in kept) and (tmp_path / "elsewhere").is_dir()
    assert (tmp_path / f".{'cd' * 32}.k3_x9q0z.tmp").is_symlink()
    assert (tmp_path / f".{'ef' * 32}.k3_x9q0z.tmp").read_text() == "a file"


def test_an_old_leftover_a_process_may_still_write_stays(tmp_path):
    held, fresh = old_leftover(tmp_path), old_leftover(tmp_path, f".{'cd' * 32}.k3_x9q0z.tmp", idle=False)
    live = _temporary_folder(tmp_path / "entry")
    with open(held / "ids.int32", "rb"):
        clear_debris(tmp_path)
    assert held.is_dir() and fresh.is_dir() and live.is_dir()


@pytest.mark.parametrize("text", ["<<: {top_k: 3}", "a: &x {top_k: 3}\n<<: *x", "? !!merge <<\n: {top_k: 3}",
                                  "<<: [{top_k: 3}, {k1: 1}]"])
def test_a_yaml_merge_key_is_refused_in_one_line(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(f"output: o\n{text}\n")
    with pytest.raises(ConfigError) as refused:
        load_config_file(path)
    line = 2 + next(number for number, part in enumerate(text.split("\n")) if "<<" in part)
    assert str(refused.value).startswith(f"{path}: line {line}: a merge key (<<) is not read: ")


def test_a_merge_key_refuses_the_command(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("data: d\noutput: o\n<<: {top_k: 3}\n")
    assert main(["bm25", "--config", str(path)]) == 2
    assert "run.yaml: line 3: a merge key (<<) is not read" in error_line(capsys)


def test_no_regex_in_src_reads_another_scripts_digits():
    """`\\d` matches every script's digits (Arabic-Indic, fullwidth), which int() then reads: the one rule is [0-9]."""
    found = [f"{path}:{number}" for path in SRC.rglob("*.py")
             for number, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"(?<!\\)\\d", line)]
    assert not found, found


@pytest.mark.parametrize("factory", ["IVF\u0661\u0660,Flat", "HNSW\uff13\uff12", "IVF1\u0660,Flat", "Fl\u0430t"])
@pytest.mark.parametrize("command", [["index", "--embeddings", "e", "--output", "o"],
                                     ["evaluate", "--model", "m", "--data", "d"]])
def test_a_factory_string_of_other_characters_is_refused_by_every_command(factory, command, capsys):
    assert main([*command, "--factory", factory]) == 2
    line = error_line(capsys)
    assert line.startswith(f"retromae: error: --factory: {factory!r}: holds ") and "digits 0-9" in line, line


@pytest.mark.parametrize(("given", "key"), [("ndcg@010", "ndcg@10"), ("recall@0100", "recall@100"),
                                            ("mrr@10", "mrr@10"), ("spearman", "spearman")])
def test_a_metric_key_is_read_to_one_form(given, key):
    assert canonical_key(given) == key


@pytest.mark.parametrize("given", ["ndcg@\u0661\u0660", "ndcg@\uff11\uff10", "ndcg@0", "ndcg@000", "ndcg@+10",
                                   "ndcg@1_0", "NDCG@10", "ndcg@", "spearman@10"])
def test_a_metric_key_of_another_form_is_refused(given):
    with pytest.raises(ValueError, match="is not a metric"):
        canonical_key(given)


def test_evaluate_keeps_the_canonical_keys_and_refuses_one_metric_twice():
    assert EvaluateConfig(model="m", data=["d"], metrics=["ndcg@010", "recall@100"]).metrics == ["ndcg@10",
                                                                                                 "recall@100"]
    with pytest.raises(ConfigError, match=r"^--metrics: names ndcg@10 twice \(ndcg@10, ndcg@010\): give it once$"):
        EvaluateConfig(model="m", data=["d"], metrics=["ndcg@10", "ndcg@010"])
