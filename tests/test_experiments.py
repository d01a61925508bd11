"""Experiment tooling: `retromae init-model` (a random BERT around a tokenizer) and `retromae report` (variant
folders as the recipes lay them out → one table, JSON and plots)."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForMaskedLM, AutoTokenizer

from retromae.cli import main
from retromae.evaluation.experiments import read_variant, report_table, write_report
from retromae.objectives.summary import describe_pretraining
from retromae.pretraining.run import PretrainConfig, pretrain
from retromae.runtime.errors import DataError


def test_init_model_saves_a_random_bert_sized_for_the_tokenizer(tiny_model_dir, tmp_path):
    output = tmp_path / "scratch"
    assert main(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(output), "--hidden-size", "64",
                 "--layers", "2", "--max-positions", "128"]) == 0
    model = AutoModelForMaskedLM.from_pretrained(output)
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert model.config.vocab_size == len(tokenizer) == len(AutoTokenizer.from_pretrained(tiny_model_dir))
    assert (model.config.hidden_size, model.config.num_hidden_layers, model.config.num_attention_heads) == (64, 2, 1)
    again = tmp_path / "again"
    main(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(again), "--hidden-size", "64",
          "--layers", "2", "--max-positions", "128"])
    same = AutoModelForMaskedLM.from_pretrained(again)
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), same.state_dict().values(), strict=True))


@pytest.mark.parametrize(("flags", "message"), [
    (["--hidden-size", "100"], "--hidden-size: must be a positive multiple of 64"),
    (["--tokenizer", "/no/such/folder"], "/no/such/folder"),
])
def test_init_model_errors_name_the_option(tiny_model_dir, tmp_path, capsys, flags, message):
    arguments = ["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(tmp_path / "m"), *flags]
    assert main(arguments) == 2
    assert message in capsys.readouterr().err


@pytest.fixture()
def variants(tiny_model_dir, tiny_corpus, tmp_path):
    """Two variant folders: one pre-trained with evaluations and times, one with a SciFact evaluation only."""
    pretrained, plain = tmp_path / "retromae", tmp_path / "none"
    pretrain(PretrainConfig(model=str(tiny_model_dir), corpus=[str(tiny_corpus)], output=str(pretrained / "pretrain"),
                            max_steps=4, batch_size=4, max_length=32, log_every=2, save_every=0,
                            cache_dir=str(tmp_path / "cache")))
    for folder, scores in ((pretrained, {"scifact": {"ndcg@10": 0.5, "recall@100": 0.75, "mrr@10": 0.4},
                                         "stsb": {"spearman": 0.625, "pearson": 0.6}}),
                           (plain, {"scifact": {"ndcg@10": 0.25, "recall@100": 0.5}})):
        (folder / "eval").mkdir(parents=True)
        for name, results in scores.items():
            (folder / "eval" / f"{name}.json").write_text(json.dumps({**results, "split": "test"}))
    (pretrained / "times.txt").write_text("pretrain 90\nfinetune 25\neval-scifact 5\n")
    return [plain, pretrained]


def test_report_gathers_variants_into_a_table_json_and_plots(variants, tmp_path):
    table = write_report(variants, tmp_path / "report", "Objectives")
    metrics = (variants[1] / "pretrain" / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line)["loss"] for line in metrics]
    header, rule, none_row, retromae_row = table.splitlines()
    assert header == ("| variant | pre-training | pre-training loss | scifact ndcg@10 | scifact recall@100 | "
                      "stsb spearman | minutes |")
    assert none_row == "| none | none | – | 0.2500 | 0.5000 | – | – |"
    assert retromae_row == (f"| retromae | retromae enhanced, enc mask 0.3, dec mask 0.5, 1 dec layer, 4 steps | "
                            f"{losses[0]:.2f} → {losses[-1]:.2f} | 0.5000 | 0.7500 | 0.6250 | 2.0 |")
    assert (tmp_path / "report" / "report.md").read_text() == f"# Objectives\n\n{table}"
    saved = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [v["name"] for v in saved] == ["none", "retromae"]
    assert saved[1]["seconds"] == {"pretrain": 90.0, "finetune": 25.0, "eval-scifact": 5.0}
    assert [step for step, _ in saved[1]["pretrain_losses"]] == [2, 4]
    assert [step for step, _ in saved[1]["encoder_mlm_losses"]] == [2, 4] and saved[0]["encoder_mlm_losses"] == []
    for plot in ("pretrain-loss.png", "metrics.png"):
        assert (tmp_path / "report" / plot).read_bytes().startswith(b"\x89PNG")


def test_pretraining_description_names_a_head_warm_up():
    config = {"objective": "retromae", "decoding": "enhanced", "encoder_mask_ratio": 0.3, "decoder_mask_ratio": 0.5,
              "decoder_layers": 1, "max_steps": 120, "freeze_encoder_steps": 60, "head_learning_rate": 1e-3}
    assert describe_pretraining(config) == ("retromae enhanced, enc mask 0.3, dec mask 0.5, 1 dec layer, 120 steps, "
                                            "heads alone for the first 60, head lr 0.001")


def test_report_command_prints_the_table(variants, tmp_path, capsys):
    assert main(["report", "--variants", *map(str, variants), "--output", str(tmp_path / "r")]) == 0
    assert "| none | none |" in capsys.readouterr().out


def test_bad_variant_folders_are_named(variants, tmp_path):
    (variants[1] / "times.txt").write_text("pretrain 90\nfinetune\n")
    with pytest.raises(DataError, match=r"times.txt:2: expected 'STAGE SECONDS'"):
        read_variant(variants[1])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty: holds no"):
        read_variant(tmp_path / "empty")
    with pytest.raises(DataError, match="missing: no such variant folder"):
        report_table([read_variant(tmp_path / "missing")])


def test_a_variant_with_only_a_metrics_file_is_reported_as_unknown_pre_training(variants, tmp_path):
    copied = tmp_path / "copied" / "pretrain"
    copied.mkdir(parents=True)
    (copied / "metrics.jsonl").write_bytes((variants[1] / "pretrain" / "metrics.jsonl").read_bytes())
    variant = read_variant(copied.parent)
    assert variant.pretraining == "unknown (no pretrain/config.json)" and len(variant.pretrain_losses) == 2
    header, rule, row = report_table([variant]).splitlines()  # no metric columns: still one cell per column
    assert header == "| variant | pre-training | pre-training loss | minutes |" and rule == "|---|---|---|---:|"
    assert row.startswith("| copied | unknown (no pretrain/config.json) | ") and row.endswith(" | – |")


def test_a_wordpiece_vocabulary_trained_twice_on_the_same_texts_has_the_same_ids():
    from itertools import islice

    from retromae.data.stdlib_docs import iter_doc_pairs
    from retromae.models.tokenizer_training import BRACKET_TOKENS, train_tokenizer

    texts = [pair.text for pair in islice(iter_doc_pairs(), 300)]
    first, second = (train_tokenizer(texts, "wordpiece", 600).get_vocab() for _ in range(2))
    special = list(BRACKET_TOKENS.values())
    assert first == second and [first[token] for token in special] == list(range(len(special)))


def test_metric_bars_are_labelled_on_an_axis_from_zero():
    """Issue 38: a 0.0000 bar had no length to see on an autoscaled axis; every bar now carries its value, the axis
    starts at 0 and ends a fifth beyond the longest bar (below 0 only for a negative value)."""
    from retromae.evaluation.experiments import metric_bars, pyplot

    plt = pyplot()
    figure, (scores, correlations, zeros) = plt.subplots(1, 3)
    metric_bars(scores, ["none", "mlm", "retromae"], [0.0, 0.0312, 0.5], "ndcg@10")
    metric_bars(correlations, ["a", "b"], [-0.25, 0.5], "stsb spearman")
    metric_bars(zeros, ["a"], [0.0], "recall@100")
    assert [text.get_text() for text in scores.texts] == ["0.0000", "0.0312", "0.5000"]
    assert scores.get_xlim() == pytest.approx((0.0, 0.6)) and scores.get_title() == "ndcg@10"
    assert correlations.get_xlim() == pytest.approx((-0.475, 0.65))
    assert zeros.get_xlim() == pytest.approx((0.0, 0.2)) and zeros.texts[0].get_text() == "0.0000"
    plt.close(figure)


def test_report_reads_an_adapt_folder(tmp_path, tiny_model_dir, capsys):
    """An `adapt` output folder is a variant: its training stage as the pre-training column, the guard's validation
    scores of the base and of what it exported as columns, the training loss."""
    import shutil

    from test_adapt import adapt, tiny_adapt, topical_corpus

    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    (base / "retromae_encoder.json").write_text(json.dumps({"pooling": "mean", "normalize": True}))
    folder = adapt(tiny_adapt(base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "adapted", max_steps=2,
                              checkpoints=1))
    guard = json.loads((folder / "guard.json").read_text())
    chosen = next(c["ndcg@10"] for c in guard["candidates"] if c["name"] == guard["chosen"])
    variant = read_variant(folder)
    assert variant.scores == {"guard base ndcg@10": guard["base"], "guard chosen ndcg@10": chosen}
    assert variant.pretraining.startswith("adapt: ") and variant.pretraining.endswith(f"exported: {guard['chosen']}")
    assert len(variant.pretrain_losses) == 2
    assert main(["report", "--variants", str(folder), "--output", str(tmp_path / "report")]) == 0
    assert f"| {guard['base']:.4f} | {chosen:.4f} |" in capsys.readouterr().out
    (folder / "guard.json").write_text(json.dumps({"metric": "ndcg@10"}))
    with pytest.raises(DataError, match="not a guard record of `retromae adapt`"):
        read_variant(folder)


# init-model's sizes (audit 7, section 5): each option's bound is the model-folder reader's (`CONFIG_NUMBERS`), and
# the parameters, as float32, are weighed against the memory the machine has free before torch allocates them.
SIZE_FIELDS = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "layers": "num_hidden_layers",
               "max_positions": "max_position_embeddings"}
SMALL = {"vocab_size": 100, "hidden_size": 64, "layers": 1, "max_positions": 8}


def size_cases():
    """(option, value, refused by its bound) at and past each bound of the table the reader checks config.json by."""
    from retromae.models.pretrained import CONFIG_NUMBERS

    for name, field in SIZE_FIELDS.items():
        domain = CONFIG_NUMBERS[field][1]
        for value, past in ((int(domain.high), False), (int(domain.high) + 1, True), (SMALL[name], False),
                            (SMALL[name] - 1, True), (int(domain.high) * 64, True)):
            if name == "hidden_size" and not past:
                value = value // 64 * 64
            yield name, value, past


@pytest.mark.parametrize(("name", "value", "past"), list(size_cases()))
def test_init_model_sizes_hold_the_reader_s_bounds_and_the_machine_s_memory(tiny_model_dir, tmp_path, monkeypatch,
                                                                          name, value, past):
    from retromae.pretraining import config as config_module
    from retromae.pretraining.config import InitModelConfig, model_parameters
    from retromae.runtime.options import ConfigError

    sizes = {**SMALL, name: value}
    build = {"output": tmp_path / "m", "corpus": [str(tmp_path / "c.txt")], **sizes}
    monkeypatch.setattr(config_module, "available_memory", lambda: 1 << 62)
    if past:
        with pytest.raises(ConfigError, match=rf"^--{name.replace('_', '-')}: must lie in \[\d+, \d+\], got {value}$"):
            InitModelConfig(**build)
        return
    InitModelConfig(**build)  # within its bound, with memory enough: accepted
    count = model_parameters("bert", sizes["vocab_size"], sizes["hidden_size"], sizes["layers"], sizes["max_positions"])
    monkeypatch.setattr(config_module, "available_memory", lambda: 4 * count - 1)
    with pytest.raises(ConfigError, match=rf"about {count:,} parameters, {4 * count:,} bytes as float32, more than "
                                          rf"the {4 * count - 1:,} bytes this machine has free"):
        InitModelConfig(**build)


@pytest.mark.parametrize("flags", [["--max-positions", "2000000"], ["--max-positions", "100000000"],
                                   ["--layers", "100000"], ["--hidden-size", "65536", "--layers", "1024"],
                                   ["--architecture", "roberta", "--max-positions", "1048576", "--layers", "1"]])
def test_init_model_refuses_a_model_no_loader_reads_or_no_memory_holds_before_building(tiny_model_dir, tmp_path,
                                                                                       capsys, flags):
    """The audit's cases: a model every loader refuses (2,000,000 positions, or RoBERTa's offset past 2^20) or one
    the allocator would die on is refused in one line, exit 2, before any weight is written."""
    output = tmp_path / "m"
    assert main(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(output), "--hidden-size", "64",
                 *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (output / "model.safetensors").exists()


def test_init_model_weighs_the_tokenizer_s_vocabulary_before_building(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """With --tokenizer the vocabulary is known once it is read: the weights are weighed with it, before torch."""
    from retromae.pretraining import config as config_module
    from retromae.pretraining.config import model_parameters

    without = model_parameters("bert", 0, 64, 1, 8)
    monkeypatch.setattr(config_module, "available_memory", lambda: 4 * without + 64)
    output = tmp_path / "m"
    assert main(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(output), "--hidden-size", "64",
                 "--layers", "1", "--max-positions", "8"]) == 2
    assert "tokens holds about" in capsys.readouterr().err
    assert not (output / "model.safetensors").exists()
