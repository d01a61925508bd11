"""Round ten: under a launch of several processes, `auto` and the other settings a process would find on its own are
the main process's, on every process (audit 12, L).

Each process resolved `auto` precision from its own machine and only rank 0's was recorded: `encode` wrote float32 and
bf16 shards into one embeddings.npy recorded bfloat16, `pretrain` recorded bf16 while rank 1 trained in float32. Now
the processes agree where their state is made (`processes.process_state` → `precision.agree_on_auto`, through
`broadcast.from_main`), before any precision is resolved; `--vocabulary-loss auto` is measured on the main process
alone and its kernel sent to the others, as fine-tuning's chunk size is.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Callable

import pytest
import torch
from conftest import bare_config, run_two_processes

from retromae.adaptation.config import AdaptConfig
from retromae.evaluation.config import EvaluateConfig
from retromae.finetuning.config import FinetuneConfig
from retromae.pretraining import run as pretraining_run
from retromae.pretraining.config import PretrainConfig
from retromae.reranking.config import RerankerConfig
from retromae.runtime import precision, processes
from retromae.runtime.cpu_features import AUTO_BF16_VARIABLE
from retromae.runtime.precision import dtype_label, resolve_dtype, resolve_mixed_precision
from retromae.runtime.run_folder import run_identity
from retromae.training import setup
from retromae.training.config import TrainingConfig

CONFIGS = (PretrainConfig, FinetuneConfig, RerankerConfig, AdaptConfig, EvaluateConfig)
PRECISIONS = {True: {"mixed_precision": "bf16", "dtype": "bfloat16"},
              False: {"mixed_precision": "no", "dtype": "float32"}}


def recorded(config: type, bf16: bool) -> bool:
    """Whether `run_identity` of `config` (its precision options auto) records the precision `bf16` says."""
    options = [field.name for field in dataclasses.fields(config) if field.name in PRECISIONS[bf16]]
    identity = run_identity(bare_config(config, mixed_precision="auto", dtype="auto"))
    return bool(options) and all(identity[name] == PRECISIONS[bf16][name] for name in options)


RESOLVED: dict[str, Callable[[bool], bool]] = {  # a path that resolves `auto` -> whether it gives what `bf16` says
    "--mixed-precision (training)": lambda bf16: resolve_mixed_precision("auto") == PRECISIONS[bf16]["mixed_precision"],
    "--dtype (Encoder.load)": lambda bf16: dtype_label(resolve_dtype("auto", torch.device("cpu"))) == PRECISIONS[bf16][
        "dtype"],
    **{f"record of {config.__name__}": lambda bf16, config=config: recorded(config, bf16) for config in CONFIGS},
}


def second_process(monkeypatch, own: bool, main: bool) -> types.SimpleNamespace:
    """Process 1 of two on a CPU whose own `auto` is bf16 when `own`, agreeing with a main process that says `main`."""
    monkeypatch.setattr(precision, "_LAUNCH_ANSWERS", {})
    monkeypatch.setenv(AUTO_BF16_VARIABLE, str(int(own)))
    state = types.SimpleNamespace(num_processes=2, process_index=1, device=torch.device("cpu"), sent=[])
    monkeypatch.setattr(precision, "from_main", lambda text, _: state.sent.append(text) or f"cpu={int(main)}")
    precision.agree_on_auto(state)
    return state


@pytest.mark.parametrize("path", sorted(RESOLVED))
@pytest.mark.parametrize("own", [False, True], ids=["own-fp32", "own-bf16"])
def test_every_process_resolves_auto_as_the_main_process(monkeypatch, capsys, path, own):
    """A process whose machine answers otherwise than the main process's resolves `auto` as the main process does
    on every path that resolves it (training, an encoder, the records), and says so in one note."""
    state = second_process(monkeypatch, own=own, main=not own)
    assert state.sent == [f"cpu={int(own)}"]
    assert RESOLVED[path](not own)
    note = capsys.readouterr().err
    assert note == (f"retromae: note: process 1: auto precision {'leaves out' if own else 'uses'} bf16 autocast on "
                    "cpu as the main process does, which this machine alone would not (--mixed-precision and --dtype "
                    "choose)\n")


def test_processes_that_agree_say_nothing_and_one_alone_asks_its_machine(monkeypatch, capsys):
    second_process(monkeypatch, own=True, main=True)
    assert resolve_mixed_precision("auto") == "bf16" and capsys.readouterr().err == ""
    monkeypatch.setattr(precision, "_LAUNCH_ANSWERS", {})
    monkeypatch.setenv(AUTO_BF16_VARIABLE, "0")
    assert resolve_mixed_precision("auto") == "no"


def test_the_process_state_agrees_where_it_forms_a_launch(monkeypatch):
    """`process_state` agrees once, where it makes the process group (the rendezvous every process reaches), and
    `make_accelerator` makes it (with --distributed-timeout) before resolving the precision it trains in."""
    import accelerate

    formed, agreed = [], []
    state = types.SimpleNamespace(num_processes=2, device=torch.device("cpu"))
    monkeypatch.setattr(accelerate, "PartialState", lambda **init: formed.append(init) or state)
    monkeypatch.setattr(processes, "agree_on_auto", agreed.append)
    monkeypatch.setattr(processes, "check_environment", lambda: None)
    monkeypatch.setattr(processes, "check_process_count", lambda count: None)
    for initialized in (False, True):
        monkeypatch.setattr(torch.distributed, "is_initialized", lambda initialized=initialized: initialized)
        assert processes.process_state() is state
    assert agreed == [state] and len(formed) == 2

    def agree(**init):
        formed.append(init)
        precision._LAUNCH_ANSWERS["cpu"] = True  # the main process's answer: bf16

    monkeypatch.setattr(precision, "_LAUNCH_ANSWERS", {})
    monkeypatch.setenv(AUTO_BF16_VARIABLE, "0")
    monkeypatch.setattr(setup, "process_state", agree)
    accelerator = setup.make_accelerator(bare_config(TrainingConfig, mixed_precision="auto", distributed_timeout=7))
    assert accelerator.mixed_precision == "bf16" and formed[-1] == {"timeout": setup.timedelta(minutes=7)}


def test_the_vocabulary_loss_is_measured_on_the_main_process_alone(monkeypatch):
    """`--vocabulary-loss auto` on the CPU: a process other than the main one measures nothing and runs the kernel
    the main process chose (a node whose CPU favours another kernel ran it before)."""
    chosen = []
    objective = types.SimpleNamespace(use_vocabulary_loss=chosen.append)
    accelerator = types.SimpleNamespace(device=torch.device("cpu"), is_main_process=False, num_processes=2)
    monkeypatch.setattr(pretraining_run, "auto_kind", lambda *_: pytest.fail("measured on process 1"))
    monkeypatch.setattr(pretraining_run, "from_main", lambda text, _: text or "chunked-torch")
    config = bare_config(PretrainConfig, vocabulary_loss="auto", batch_size=2, max_length=16)
    pretraining_run.choose_vocabulary_loss(objective, config, accelerator)
    assert chosen == ["chunked-torch"]


@pytest.mark.slow
def test_two_processes_whose_machines_differ_compute_in_the_main_process_precision():
    """Two gloo processes, rank 1's CPU without bf16 under auto (RETROMAE_CPU_BF16=0), rank 0's with it: both train
    and encode in bf16 (the Accelerator's precision, an encoder's dtype), and a text and rows (mined negatives) the
    main process sends arrive whole."""
    output = run_two_processes("dist_auto_precision.py")
    said = sorted(re.findall(r"rank \d: [^\n]*?✓'", output))
    assert said == [f"rank {rank}: bf16 bfloat16 'données\\tà·✓'" for rank in (0, 1)]
    assert sorted(re.findall(r"rank \d rows: [^\n]*\]\]", output)) == [
        f"rank {rank} rows: [[3, 1, 4], [], [15, 9]]" for rank in (0, 1)]
