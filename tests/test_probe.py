"""Retrieval probes while pre-training: the seeded sample, deterministic scores, an unchanged training trajectory,
exact resume of probe rows, the best-probe export, option errors, and probe curves in `retromae report`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_sentences, tiny_beir

import retromae.training.loop
from retromae.cli import main
from retromae.data.retrieval_sets import Passage, RetrievalSet, load_retrieval_set
from retromae.evaluation.curves import ProbePoint, crossover, probe_points
from retromae.evaluation.experiments import write_report
from retromae.evaluation.metrics import evaluate_run
from retromae.evaluation.probe import sample_retrieval_set
from retromae.models.encoder import Encoder
from retromae.pretraining.run import PretrainConfig, pretrain
from retromae.retrieval.search import dense_search
from retromae.runtime.options import ConfigError

LOSSES = ("loss", "encoder_mlm", "decoder", "lr", "tokens")
PROBES = ("probe_ndcg@10", "probe_recall@100", "probe_sts_spearman")


@pytest.fixture(scope="module")
def probe_data(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny BEIR folder and an STS Benchmark file of 20 pairs with varied gold scores."""
    folder = tmp_path_factory.mktemp("probe-data")
    tiny_beir(folder / "beir")
    sentences = make_sentences(40, seed=3)
    rows = [f"main-news\tfile\t2012\t{i:04d}\t{i % 6}.0\t{sentences[2 * i]}\t{sentences[2 * i + 1]}"
            for i in range(20)]
    (folder / "sts.tsv").write_text("\n".join(rows) + "\n")
    return folder / "beir", folder / "sts.tsv"


def config(model, corpus, output, **overrides) -> PretrainConfig:
    values = dict(model=str(model), corpus=[str(corpus)], output=str(output), max_steps=6, batch_size=4,
                  max_length=32, log_every=1, save_every=3, learning_rate=1e-3, cache_dir=str(output.parent / "cache"))
    values.update(overrides)
    return PretrainConfig(**values)


def probing(probe_data) -> dict:
    beir, sts = probe_data
    return dict(probe=str(beir), probe_sts=str(sts), probe_every=2, probe_queries=8, probe_documents=20,
                keep_best_probe=True, keep_checkpoints=1)


def read_metrics(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory, probe_data) -> Path:
    """A probed run of 6 steps (probes at 0, 2, 4, 6; checkpoints at 3 and 6, one kept) and its corpus."""
    folder = tmp_path_factory.mktemp("probed")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(make_sentences(4, seed=i))}) + "\n" for i in range(60)))
    return pretrain(config(tiny_model_dir, corpus, folder / "run", **probing(probe_data)))


def test_sample_keeps_judged_documents_and_is_fixed_by_its_seed(probe_data):
    full = load_retrieval_set(probe_data[0], "test")
    sample = sample_retrieval_set(full, queries=5, documents=20, seed=3)
    assert len(sample.queries) == 5 and len(sample.corpus) == 20
    assert all(doc_id in sample.corpus for judged in sample.qrels.values() for doc_id in judged)
    assert sample == sample_retrieval_set(full, queries=5, documents=20, seed=3)
    assert sample.queries != sample_retrieval_set(full, queries=5, documents=20, seed=4).queries
    everything = sample_retrieval_set(full, queries=100, documents=1000, seed=3)
    assert everything.queries == full.queries and everything.corpus == full.corpus


def test_more_judged_documents_than_asked_are_all_kept():
    corpus = {f"d{i}": Passage("", f"text {i}") for i in range(10)}
    data = RetrievalSet(corpus, {"q": "query"}, {"q": {f"d{i}": 1 for i in range(6)}})
    assert sorted(sample_retrieval_set(data, queries=1, documents=3, seed=0).corpus) == [f"d{i}" for i in range(6)]


def test_probes_are_deterministic_and_leave_the_training_trajectory_unchanged(tiny_model_dir, reference,
                                                                             tmp_path, probe_data):
    corpus = reference.parent / "corpus.jsonl"
    plain = read_metrics(pretrain(config(tiny_model_dir, corpus, tmp_path / "plain")))
    probed = read_metrics(reference)
    again = read_metrics(pretrain(config(tiny_model_dir, corpus, tmp_path / "again", **probing(probe_data))))

    assert [r["step"] for r in probed] == [0, 1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in probed if "probe_ndcg@10" in r] == [0, 2, 4, 6]
    for ours, theirs in zip(probed[1:], plain, strict=True):
        assert {key: ours[key] for key in LOSSES} == {key: theirs[key] for key in LOSSES}  # exactly equal
    for ours, theirs in zip(probed, again, strict=True):
        assert {key: ours.get(key) for key in PROBES} == {key: theirs.get(key) for key in PROBES}
    assert all(0 <= r["probe_ndcg@10"] <= 1 and -1 <= r["probe_sts_spearman"] <= 1 and r["probe_seconds"] > 0
               for r in probed if "probe_ndcg@10" in r)


def test_probe_rows_survive_a_kill_and_resume(tiny_model_dir, reference, tmp_path, monkeypatch, probe_data):
    corpus = reference.parent / "corpus.jsonl"
    interrupted = tmp_path / "interrupted"
    original_save = retromae.training.loop.Trainer.save_checkpoint

    def die_before_step_six_is_saved(self):
        if self.state.step == 6:  # the probe rows of steps 4 and 6 are written, the last checkpoint is step 3
            raise KeyboardInterrupt("simulated kill before the step-6 checkpoint")
        original_save(self)

    monkeypatch.setattr(retromae.training.loop.Trainer, "save_checkpoint", die_before_step_six_is_saved)
    with pytest.raises(KeyboardInterrupt):
        pretrain(config(tiny_model_dir, corpus, interrupted, **probing(probe_data)))
    assert [r["step"] for r in read_metrics(interrupted) if "probe_ndcg@10" in r] == [0, 2, 4, 6]
    monkeypatch.setattr(retromae.training.loop.Trainer, "save_checkpoint", original_save)
    resumed = read_metrics(pretrain(config(tiny_model_dir, corpus, interrupted, resume=True, **probing(probe_data))))

    expected = read_metrics(reference)
    assert [r["step"] for r in resumed] == [r["step"] for r in expected] == [0, 1, 2, 3, 4, 5, 6]
    for ours, theirs in zip(resumed, expected, strict=True):
        assert set(ours) == set(theirs)
        for key in set(ours) & {*LOSSES, *PROBES}:
            assert ours[key] == pytest.approx(theirs[key], rel=1e-5), (ours["step"], key)
    best = json.loads((interrupted / "best-probe" / "probe.json").read_text())
    assert best["step"] == max((r for r in resumed if "probe_ndcg@10" in r), key=lambda r: r["probe_ndcg@10"])["step"]


def test_best_probe_export_is_the_highest_logged_score_and_outlives_pruning(reference, probe_data):
    output = reference
    probes = [r for r in read_metrics(output) if "probe_ndcg@10" in r]
    best = max(probes, key=lambda r: r["probe_ndcg@10"])  # the first of equal scores, as the probe keeps it
    saved = json.loads((output / "best-probe" / "probe.json").read_text())
    assert saved["step"] == best["step"] and saved["probe_ndcg@10"] == best["probe_ndcg@10"]
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == ["step-0000006"]
    assert (output / "best-probe" / "sentence-transformer" / "modules.json").is_file()
    assert (output / "best-probe" / "pretrain_head.safetensors").is_file()

    sample = sample_retrieval_set(load_retrieval_set(probe_data[0], "test"), queries=8, documents=20, seed=0)
    encoder = Encoder.load(output / "best-probe" / "encoder", device="cpu", max_length=32)
    run = dense_search(encoder, sample.corpus_texts(), sample.queries, k=100, show_progress=False)
    assert evaluate_run(sample.qrels, run)["ndcg@10"] == pytest.approx(best["probe_ndcg@10"], abs=1e-6)


@pytest.mark.parametrize(("overrides", "flag"), [
    (dict(probe="x", probe_every=3, log_every=2), "--probe-every"),
    (dict(keep_best_probe=True), "--keep-best-probe"),
    (dict(probe="x", probe_metric="sts_spearman"), "--probe-metric"),
    (dict(probe="x", probe_queries=0), "--probe-queries"),
])
def test_bad_probe_options_name_the_option(tmp_path, overrides, flag):
    with pytest.raises(ConfigError, match=flag):
        PretrainConfig(model="m", corpus=["c"], output=str(tmp_path), **overrides)


def test_probe_every_need_not_divide_when_not_probing(tmp_path):
    assert PretrainConfig(model="m", corpus=["c"], output=str(tmp_path), log_every=7).probe_every == 500


def points(values: list[float], every: int = 10) -> list[ProbePoint]:
    return [ProbePoint(i * every, i * every * 100, {"probe_ndcg@10": v}) for i, v in enumerate(values)]


def test_crossover_is_the_first_step_from_which_a_run_stays_above():
    run, other = points([0.1, 0.3, 0.2, 0.4, 0.5]), points([0.2, 0.25, 0.25, 0.3, 0.3])
    by_step = {p.step: p.scores["probe_ndcg@10"] for p in other}
    assert crossover(run, lambda p: by_step[p.step], "probe_ndcg@10").step == 30
    assert crossover(other, lambda p: by_step[p.step] + 1, "probe_ndcg@10") is None
    assert crossover(run, lambda p: 0.1 if p.step else None, "probe_ndcg@10").step == 10


def test_probe_points_read_probe_rows_only():
    records = [{"step": 0, "tokens": 0, "probe_ndcg@10": 0.1, "probe_seconds": 2.0},
               {"step": 1, "loss": 3.0, "tokens": 10}, {"step": 2, "loss": 2.0, "tokens": 20, "probe_ndcg@10": 0.2}]
    assert probe_points(records) == [ProbePoint(0, 0, {"probe_ndcg@10": 0.1}),
                                     ProbePoint(2, 20, {"probe_ndcg@10": 0.2})]


def test_report_plots_probe_curves_of_several_runs(tmp_path):
    for name, values in (("mlm", [0.1, 0.1, 0.15]), ("retromae", [0.1, 0.2, 0.3])):
        folder = tmp_path / name / "pretrain"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"objective": name, "decoding": "enhanced",
                                                        "encoder_mask_ratio": 0.3, "decoder_mask_ratio": 0.5,
                                                        "max_steps": 20}))
        rows = [{"step": 0, "tokens": 0, "probe_ndcg@10": values[0]}]
        rows += [{"step": s, "loss": 5.0 - s / 10, "tokens": 64 * s, **({"probe_ndcg@10": values[s // 10]}
                  if s % 10 == 0 else {})} for s in range(5, 25, 5)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = write_report([tmp_path / "mlm", tmp_path / "retromae"], tmp_path / "report", "Probes")
    assert (tmp_path / "report" / "probe-curves.png").stat().st_size > 0
    row = next(line for line in table.splitlines() if line.startswith("| retromae | 0.1000"))
    assert row.split(" | ")[4:6] == ["10 (640 tokens)", "10 (640 tokens)"]  # above its step 0, above mlm
    saved = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [p["step"] for p in saved[1]["probes"]] == [0, 10, 20]


def test_checkpointed_steps_are_logged_and_tokens_accumulate(tiny_model_dir, reference, tmp_path):
    every = read_metrics(reference)
    output = pretrain(config(tiny_model_dir, reference.parent / "corpus.jsonl", tmp_path / "run", log_every=2))
    records = read_metrics(output)
    assert [r["step"] for r in records] == [2, 3, 4, 6]  # step 3 is checkpointed, so it is logged too
    assert [r["tokens"] for r in records] == [every[step]["tokens"] for step in (2, 3, 4, 6)]


def test_a_best_probe_of_the_untrained_model_is_said_and_listed(tiny_model_dir, probe_data, tmp_path, capsys, caplog):
    """Issue 38: at a learning rate of 1e-12 (the float32 weights do not change) every probe scores as step 0's, so
    best-probe/ holds the untrained model: a warning says so, and the closing list of what the run wrote names
    best-probe/ and tensorboard/."""
    beir, _ = probe_data
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(make_sentences(4, seed=i))}) + "\n" for i in range(60)))
    output = tmp_path / "run"
    arguments = ["pretrain", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--output", str(output),
                 "--max-steps", "4", "--batch-size", "4", "--max-length", "32", "--learning-rate", "1e-12",
                 "--cache-dir", str(tmp_path / "cache"), "--probe", str(beir), "--probe-every", "2", "--log-every", "2",
                 "--probe-queries", "8", "--probe-documents", "20", "--keep-best-probe", "--report-to", "tensorboard"]
    assert main(arguments) == 0
    assert json.loads((output / "best-probe" / "probe.json").read_text())["step"] == 0
    warnings = [r.getMessage() for r in caplog.records if "untrained model" in r.getMessage()]
    assert len(warnings) == 1 and "step 0" in warnings[0] and str(output / "best-probe") in warnings[0]
    for folder, steps in (("encoder", "- **Steps:** 4 steps of 4 blocks of 32 tokens"),
                          ("best-probe/sentence-transformer", "- **Steps:** 0 of 4 steps of 4 blocks of 32 tokens")):
        card = (output / folder / "README.md").read_text()
        assert f"- **Base model:** {tiny_model_dir}\n" in card and f"- **Training data:** {corpus}\n" in card
        assert "- **Training:** pre-training: retromae enhanced, enc mask 0.3, dec mask 0.5, 1 dec layer" in card
        assert steps in card and "Unknown" not in card
    chosen = (output / "best-probe" / "encoder" / "README.md").read_text()
    assert "- **Chosen by:** the best probe score (probe_ndcg@10 " in chosen  # 0.x, or 1.0000 on 8 easy queries
    listed = capsys.readouterr().out.split("wrote:")[1]
    assert f"best probe            {output / 'best-probe'}" in listed
    assert f"tensorboard           {output / 'tensorboard'}" in listed
