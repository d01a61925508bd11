"""`--vocabulary-loss auto` on the CPU (`retromae.losses.vocabulary_choice`): the choice from timings (injected, never
measured here: tests check logic, not speed), the cache keyed by CPU, threads, torch version, precision and shape,
re-measured when damaged, and the real timing of every candidate at a tiny shape."""

from __future__ import annotations

import json
import math

import pytest
import torch

from retromae.losses.vocabulary_choice import (
    CALIBRATION_ROWS,
    MARGIN,
    auto_kind,
    cache_key,
    candidates,
    choose,
    cpu_model,
    describe,
    time_candidates,
)
from retromae.models import onednn


def test_a_fused_kernel_is_chosen_only_when_clearly_faster_than_unfused():
    assert choose({"unfused": 1.0, "chunked-torch": 0.90, "chunked": 1.30}) == "chunked-torch"
    assert choose({"unfused": 1.0, "chunked-torch": 0.80, "chunked": 0.60}) == "chunked"  # the fastest fused
    assert choose({"unfused": 1.0, "chunked-torch": 0.97, "chunked": 1.27}) == "unfused"  # within the margin
    assert choose({"unfused": 1.0, "chunked-torch": MARGIN}) == "chunked-torch"  # at the margin
    assert choose({"unfused": 1.0, "chunked-torch": 1.07, "chunked": 1.8}) == "unfused"  # the Xeon of issue 51
    assert choose({"unfused": 1.0}) == "unfused"


def test_the_candidates_follow_the_precision():
    assert candidates(torch.bfloat16) == ("unfused", "chunked-torch")  # oneDNN's products are float32 only
    fused = ("chunked-torch", "chunked") if onednn.available() else ("chunked-torch",)
    assert candidates(torch.float32) == ("unfused", *fused)


def test_measured_once_then_read_from_the_cache(tmp_path):
    cache = tmp_path / "cache" / "vocabulary-loss.json"  # its folder does not exist yet
    calls = []

    def measure(width, vocab, rows, dtype):
        calls.append((width, vocab, rows, dtype))
        return {"unfused": 2.0, "chunked-torch": 1.0}

    assert auto_kind(384, 30522, 16 * 128, torch.float32, cache, measure) == \
        ("chunked-torch", {"unfused": 2.0, "chunked-torch": 1.0}, True)
    assert calls == [(384, 30522, CALIBRATION_ROWS, torch.float32)]  # rows capped: the ratio, not the total
    stored = json.loads(cache.read_text())
    key = cache_key(384, 30522, CALIBRATION_ROWS, torch.float32)
    assert stored == {key: {"unfused": 2.0, "chunked-torch": 1.0}}
    assert cpu_model() in key and torch.__version__ in key and f"{torch.get_num_threads()} threads" in key
    assert auto_kind(384, 30522, 4096, torch.float32, cache, measure)[2] is False and len(calls) == 1
    kind, _, fresh = auto_kind(384, 30522, 4096, torch.bfloat16, cache, lambda *a: {"unfused": 1.0,
                                                                                   "chunked-torch": 1.2})
    assert (kind, fresh) == ("unfused", True) and len(json.loads(cache.read_text())) == 2  # one entry each


@pytest.mark.parametrize("content", ["{not json", '{"k": NaN}', "[1, 2]", '{"k": {"unfused": -1}}'])
def test_a_damaged_cache_is_measured_again(tmp_path, content):
    cache = tmp_path / "vocabulary-loss.json"
    cache.write_text(content)
    key = cache_key(8, 100, 8, torch.float32)
    if content.startswith('{"k"'):
        cache.write_text(content.replace('"k"', json.dumps(key)))
    kind, timings, fresh = auto_kind(8, 100, 8, torch.float32, cache, lambda *a: {"unfused": 1.0, "chunked": 0.5})
    assert (kind, fresh) == ("chunked", True)
    assert json.loads(cache.read_text())[key] == timings


def test_an_unwritable_cache_still_gives_a_choice(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    kind, _, fresh = auto_kind(8, 100, 8, torch.float32, blocker / "vocabulary-loss.json",
                               lambda *a: {"unfused": 1.0, "chunked-torch": 0.5})
    assert (kind, fresh) == ("chunked-torch", True)


def test_every_candidate_is_timed_at_the_given_shape():
    timings = time_candidates(width=8, vocab=100, rows=16, dtype=torch.float32, rounds=1)
    assert set(timings) == set(candidates(torch.float32))
    assert all(math.isfinite(seconds) and seconds > 0 for seconds in timings.values())
    assert set(time_candidates(8, 100, 16, torch.bfloat16, rounds=1)) == {"unfused", "chunked-torch"}
    line = describe("unfused", {"unfused": 0.0125, "chunked-torch": 0.02}, fresh=False)
    assert line == "vocabulary loss: auto runs unfused on this CPU (cached: unfused 12 ms, chunked-torch 20 ms a pass)"


def test_a_pretraining_run_takes_the_cached_choice_and_says_so(tiny_tokenizer, tmp_path, capsys):
    """`retromae pretrain` with auto on the CPU: the objective runs the kind the cache holds for its shapes (in
    the sandboxed $RETROMAE_CACHE), and the run's log names it; any other choice is left as given."""
    from test_objectives import build

    from retromae.losses.vocabulary_choice import CACHE_FILE
    from retromae.pretraining.run import choose_vocabulary_loss
    from retromae.runtime.io import cache_folder

    objective = build("retromae", tiny_tokenizer)
    vocab, width = objective.vocabulary.projection.weight.shape
    cache = cache_folder() / CACHE_FILE
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({cache_key(width, vocab, 2 * 16, torch.float32): {"unfused": 1.0,
                                                                                   "chunked-torch": 0.5}}))
    accelerator = type("Accelerator", (), {"device": torch.device("cpu"), "mixed_precision": "no",
                                           "is_main_process": True, "num_processes": 1})()
    config = type("Config", (), {"vocabulary_loss": "auto", "batch_size": 2, "max_length": 16})()
    choose_vocabulary_loss(objective, config, accelerator)
    assert objective.vocabulary.kind == "chunked-torch" and not objective.vocabulary.use_onednn
    assert capsys.readouterr().out == ("vocabulary loss: auto runs chunked-torch on this CPU (cached: unfused "
                                       "1000 ms, chunked-torch 500 ms a pass)\n")
    config.vocabulary_loss = "unfused"
    objective.use_vocabulary_loss("unfused")
    choose_vocabulary_loss(objective, config, accelerator)
    assert objective.vocabulary.kind == "unfused" and capsys.readouterr().out == ""
