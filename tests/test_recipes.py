"""The experiment recipes: every script parses; the objectives, two-stage, fine-tuning and crossover recipes run end
to end at toy size (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_sentences, tiny_beir, tiny_bert_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "recipes").glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_recipe_parses(script):
    subprocess.run(["bash", "-n", str(script)], check=True)


def tiny_shared_data(folder: Path) -> None:
    """The layout of ../shared/data at toy size: a BEIR SciFact, STS-B test pairs, a pre-training corpus."""
    tiny_beir(folder / "beir" / "scifact")
    sentences = make_sentences(40, seed=3)
    (folder / "sts" / "stsbenchmark").mkdir(parents=True)
    rows = [f"main\tfile\t2012\t{i:04d}\t{i % 6}.0\t{sentences[i]}\t{sentences[i + 1]}" for i in range(20)]
    (folder / "sts" / "stsbenchmark" / "sts-test.csv").write_text("\n".join(rows) + "\n")
    (folder / "pretrain").mkdir()
    corpus = [json.dumps({"id": str(i), "text": " ".join(make_sentences(4, seed=i))}) for i in range(40)]
    (folder / "pretrain" / "corpus.jsonl").write_text("\n".join(corpus) + "\n")
    (folder / "pairs").mkdir()
    pairs = [json.dumps({"query": sentences[i], "pos": [sentences[i + 1]], "neg": []}) for i in range(30)]
    (folder / "pairs" / "snli-dev-test.jsonl").write_text("\n".join(pairs) + "\n")


def small_encoder_environment(tiny_model_dir: Path, tmp_path: Path, **sizes: str) -> dict[str, str]:
    """Toy-size shared data under tmp_path, and the environment that runs recipes/small_encoder.sh on it."""
    tiny_shared_data(tmp_path / "data")
    return {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT / "src"), "DATA": str(tmp_path / "data"),
            "CORPUS": str(tmp_path / "data" / "pretrain" / "corpus.jsonl"), "TOKENIZER": str(tiny_model_dir),
            "HIDDEN": "64", "LAYERS": "1", "LENGTH": "32", "BATCH": "4", "FT_EPOCHS": "1", **sizes}


@pytest.mark.slow
def test_objectives_recipe_runs_every_variant_and_reports(tiny_model_dir, tmp_path):
    environment = small_encoder_environment(tiny_model_dir, tmp_path, STEPS="2")
    runs = tmp_path / "runs"
    subprocess.run(["bash", "recipes/objectives.sh", str(runs)], cwd=ROOT, env=environment, check=True,
                   capture_output=True)
    table = (runs / "report-objectives" / "report.md").read_text().splitlines()
    variants = ["none", "mlm", "seed", "retromae-basic", "retromae-enhanced", "retromae-contrastive"]
    assert [row.split(" | ")[0].removeprefix("| ") for row in table[4:]] == variants
    for variant in variants:
        stages = (runs / variant / "times.txt").read_text().split()[::2]
        assert stages == (["pretrain"] if variant != "none" else []) + ["finetune", "eval-scifact", "eval-stsb"]
    first = (runs / "mlm" / "times.txt").read_text()
    subprocess.run(["bash", "recipes/objectives.sh", str(runs)], cwd=ROOT, env=environment, check=True,
                   capture_output=True)
    assert (runs / "mlm" / "times.txt").read_text() == first  # a finished stage is never run again


@pytest.mark.slow
def test_two_stage_recipe_continues_stage_one_on_the_corpus_and_on_pairs_in_parallel(tiny_model_dir, tmp_path):
    environment = small_encoder_environment(tiny_model_dir, tmp_path, STEPS="6", PARALLEL="2")
    runs = tmp_path / "runs"
    subprocess.run(["bash", "recipes/two_stage.sh", str(runs)], cwd=ROOT, env=environment, check=True,
                   capture_output=True)
    table = (runs / "report-two-stage" / "report.md").read_text().splitlines()
    assert [row.split(" | ")[0].removeprefix("| ") for row in table[4:]] == [
        "retromae-enhanced", "stage2-scifact", "stage2-snli"]
    for stage2, source in (("stage2-scifact", "corpus"), ("stage2-snli", "pairs")):
        config = json.loads((runs / stage2 / "pretrain" / "config.json").read_text())
        assert config["objective"] == "retromae+contrastive" and config["max_steps"] == 2
        assert config["init_from"] == str(runs / "retromae-enhanced" / "pretrain") and config[source]
        assert (runs / stage2 / "eval" / "stsb.json").is_file()
    assert (runs / "stage2-scifact" / "cache").is_dir()  # concurrent runs keep their own token stores


@pytest.mark.slow
def test_finetune_recipe_runs_every_row_and_reports(tiny_tokenizer, tmp_path):
    from transformers import BertForMaskedLM

    model = tmp_path / "model"  # the recipe evaluates at 256 passage tokens: the shared tiny model reads 128
    config = tiny_bert_config(len(tiny_tokenizer))
    config.max_position_embeddings = 512
    BertForMaskedLM(config).save_pretrained(model)
    tiny_tokenizer.save_pretrained(model)
    tiny_shared_data(tmp_path / "data")
    environment = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT / "src"),
                   "DATA": str(tmp_path / "data"), "FT_BATCH": "8", "TEACHER_STEPS": "4"}
    runs = tmp_path / "runs"
    ran = subprocess.run(["bash", "recipes/finetune_scifact.sh", str(model), str(runs)], cwd=ROOT,
                         env=environment, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    table = (runs / "report" / "report.md").read_text().splitlines()
    rows = ["zero-shot", "in-batch", "bm25-negatives", "mined", "ance", "mined-ance-2ep", "distill", "bm25-search"]
    assert [row.split(" | ")[0].removeprefix("| ") for row in table[4:]] == rows
    assert (runs / "times.txt").read_text().split()[::2] == ["mine", "train-reranker", "score"]


@pytest.mark.slow
def test_crossover_recipe_probes_both_objectives_and_reports_curves(tiny_model_dir, tmp_path):
    tiny_shared_data(tmp_path / "data")
    environment = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT / "src"), "SCALE": "gpu",
                   "DATA": str(tmp_path / "data"), "CORPUS": str(tmp_path / "data" / "pretrain" / "corpus.jsonl"),
                   "TOKENIZER": str(tiny_model_dir), "HIDDEN": "64", "LAYERS": "1", "LENGTH": "32", "BATCH": "4",
                   "STEPS": "4", "LOG_EVERY": "1", "PROBE_EVERY": "2", "PRECISION": "no"}
    runs = tmp_path / "runs"
    subprocess.run(["bash", "recipes/crossover.sh", str(runs)], cwd=ROOT, env=environment, check=True,
                   capture_output=True)
    for variant in ("mlm", "retromae"):
        metrics = runs / variant / "pretrain" / "metrics.jsonl"
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert [r["step"] for r in records if "probe_sts_spearman" in r] == [0, 2, 4]
        assert (runs / variant / "pretrain" / "best-probe" / "encoder").is_dir()
    assert "### probe_ndcg@10" in (runs / "report" / "report.md").read_text()
    assert (runs / "report" / "probe-curves.png").is_file()


@pytest.mark.slow
def test_field_objectives_recipe_scores_every_seed_and_gathers_the_seeds(tmp_path):
    tiny_shared_data(tmp_path / "data")
    variants = ["none", "mlm", "contriever", "none-mean", "mlm-mean"]  # every stage and branch of the recipe
    environment = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT / "src"),
                   "DATA": str(tmp_path / "data"), "DATASET": str(tmp_path / "data" / "beir" / "scifact"),
                   "VOCAB": "200", "HIDDEN": "64", "LAYERS": "2", "LENGTH": "32", "BATCH": "4", "STEPS": "2",
                   "LOG_EVERY": "1", "FT_EPOCHS": "1", "SEEDS": "1 2", "VARIANTS": " ".join(variants)}
    runs = tmp_path / "runs"
    subprocess.run(["bash", "recipes/field_objectives.sh", str(runs)], cwd=ROOT, env=environment, check=True,
                   capture_output=True)
    for seed in ("1", "2"):
        for variant in variants:
            stages = (runs / f"seed-{seed}" / variant / "times.txt").read_text().split()[::2]
            assert stages == (["pretrain"] if variant in ("mlm", "contriever") else []) + [
                "eval-zero-shot", "finetune", "eval-test", "eval-stsb"]
        config = json.loads((runs / f"seed-{seed}" / "contriever" / "pretrain" / "config.json").read_text())
        assert (config["seed"], config["batch_size"], config["queue_size"]) == (int(seed), 2, 128)
        assert (runs / f"report-seed-{seed}" / "report.md").is_file()
    encoder = runs / "seed-1" / "contriever" / "pretrain" / "encoder"
    assert json.loads((encoder / "retromae_encoder.json").read_text())["pooling"] == "mean"
    for variant, pooling in (("none", "cls"), ("none-mean", "mean"), ("mlm", "cls"), ("mlm-mean", "mean")):
        fine_tuned = runs / "seed-1" / variant / "finetune" / "sentence-transformer"
        assert json.loads((fine_tuned / "1_Pooling" / "config.json").read_text())["pooling_mode"] == pooling
    finetuned_from = json.loads((runs / "seed-1" / "mlm-mean" / "finetune" / "config.json").read_text())["model"]
    assert Path(finetuned_from).resolve() == (runs / "seed-1" / "mlm" / "pretrain" / "encoder").resolve()
    table = (runs / "report" / "seeds.md").read_text().splitlines()
    assert [row.split(" | ")[0].removeprefix("| ") for row in table[6:]] == variants
    assert all(row.split(" | ")[1] == "2" for row in table[6:])  # two seeds in every row
    assert "test ndcg@10" in table[4] and "zero-shot ndcg@10" in table[4] and "stsb spearman" in table[4]
    assert (runs / "report" / "seeds.png").is_file()


@pytest.mark.slow
def test_two_stage_cpu_recipe_scores_every_arm_from_one_stage_one_and_writes_one_table(tmp_path):
    data, runs = tmp_path / "data", tmp_path / "runs"
    tiny_shared_data(data)
    sts = data / "sts" / "stsbenchmark"
    (sts / "sts-dev.csv").write_text((sts / "sts-test.csv").read_text())
    sizes = {"vocab_size": 200, "hidden_size": 64, "layers": 1, "max_length": 32, "batch_size": 8,
             "finetune_epochs": 1.0, "log_every": 1, "probe_every": 2}
    command = [sys.executable, "recipes/two_stage_cpu.py", "--output", str(runs), "--data", str(data),
               "--corpus", str(data / "pretrain" / "corpus.jsonl"), "--seeds", "1", "--stage1-seed", "42",
               "--stage2-data", "snli", "--stage1-steps", "4", "--stage2-steps", "2", "--scratch-weights", "1",
               "--sizes", json.dumps(sizes)]
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run(command, cwd=ROOT, env=environment, check=True, capture_output=True)
    table, _, paired, _, stage1 = (runs / "two-stage.md").read_text().split("\n\n")
    rows = [[cell.strip() for cell in row.split("|")[1:5]] for row in table.splitlines()[2:]]
    arms = ["RetroMAE + contrastive", "contrastive alone", "RetroMAE alone"]
    assert rows == [["none", "–", "no pre-training", "1"], ["retromae", "–", "no stage 2", "1"],
                    ["mlm", "–", "no stage 2", "1"], *[[s1, "snli", arm, "1"] for s1 in ("retromae", "mlm")
                                                       for arm in arms]]
    assert [[cell.strip() for cell in row.split("|")[1:5]] for row in paired.splitlines()[2:]] == [
        [s1, "snli", other, "1"] for s1 in ("retromae", "mlm")
        for other in ("RetroMAE alone", "contrastive alone", "no stage 2")]
    assert [[cell.strip() for cell in row.split("|")[1:4]] for row in stage1.splitlines()[2:]] == [
        ["–", "no stage 2", "1"], *[["snli", arm, "1"] for arm in arms]]
    assert (runs / "two-stage.png").is_file()
    assert not (runs / "seed1" / "initial-model").exists()  # stage 1 is trained once, with --stage1-seed
    assert (runs / "seed42" / "scratch-w1" / "eval" / "stsb.json").is_file()  # not a row: seed 42 is not in --seeds
    stage2 = json.loads((runs / "seed1" / "retromae" / "snli" / "retromae" / "pretrain" / "config.json").read_text())
    assert stage2["init_from"] == str(runs / "seed42" / "retromae" / "pretrain")
    assert (stage2["objective"], stage2["contrastive_weight"], stage2["seed"]) == ("retromae+contrastive", 0.0, 1)
    assert not stage2["init_missing_head"]  # RetroMAE's stage 2 continues with its decoder
    control = json.loads((runs / "seed1" / "mlm" / "snli" / "retromae" / "pretrain" / "config.json").read_text())
    assert (control["init_from"], control["init_missing_head"]) == (str(runs / "seed42" / "mlm" / "pretrain"), True)
    assert "decoder.0.*" in (runs / "seed1" / "mlm" / "snli" / "retromae" / "pretrain.log").read_text()
    again = subprocess.run(command, cwd=ROOT, env=environment, check=True, capture_output=True, text=True)
    assert " start " not in again.stdout  # every finished job is skipped


@pytest.mark.slow
def test_backbone_families_recipe_runs_the_quickstart_per_family_and_seed_and_gathers_them(tmp_path):
    tiny_beir(tmp_path / "data")
    runs = tmp_path / "runs"
    options = (f"--data {tmp_path / 'data'} --vocab-size 300 --hidden-size 64 --layers 1 --max-length 32 "
               "--pretrain-steps 3 --pretrain-batch-size 4 --finetune-epochs 1 --finetune-batch-size 8")
    environment = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT / "src"), "SEEDS": "1 2",
                   "FAMILIES": "modernbert xlm-roberta", "QUICKSTART_OPTIONS": options}
    subprocess.run(["bash", "recipes/backbone_families.sh", str(runs)], cwd=ROOT, env=environment, check=True,
                   capture_output=True)
    gathered = json.loads((runs / "families.json").read_text())
    assert {family: sorted(seeds) for family, seeds in gathered.items()} == {"modernbert": ["1", "2"],
                                                                              "xlm-roberta": ["1", "2"]}
    assert json.loads((runs / "modernbert-seed-1" / "quickstart-config.json").read_text())["architecture"] \
        == "modernbert"
    table = (runs / "families.md").read_text()
    assert "| xlm-roberta | RetroMAE (enhanced) | 2 |" in table and "| modernbert | MLM | 2 |" in table
    assert "| modernbert | MLM | 2 |" in table.split("Paired by seed")[1]
