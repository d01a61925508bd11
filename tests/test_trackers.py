"""`--report-to`: the training loop's records reach Accelerate's trackers; TensorBoard's event files read back equal
metrics.jsonl; a tracker whose package is missing is a one-line error before any work."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_train import NoisyRegression, collate, dataset, settings

from retromae.cli import main
from retromae.runtime.options import ConfigError
from retromae.training import Trainer, seed_everything
from retromae.training.trackers import TENSORBOARD_DIR, TRACKERS, check_installed


def tensorboard_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of the event files in `folder`: (step, value) in the order written."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(event.step, event.value) for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_scalars_equal_metrics_jsonl(tmp_path):
    pytest.importorskip("tensorboard")
    config = settings(tmp_path, report_to=["tensorboard"])
    seed_everything(config.seed)
    Trainer(NoisyRegression(), dataset(), collate, config).run()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    scalars = tensorboard_scalars(tmp_path / "run" / TENSORBOARD_DIR)
    names = {key for record in records for key in record if key != "step"}
    assert names == set(scalars) and {"loss", "error", "penalty", "lr", "tokens", "tokens_per_s"} <= names
    for name in names:
        expected = [(record["step"], np.float32(record[name])) for record in records if name in record]
        assert scalars[name] == expected, name
    assert [step for step, _ in scalars["loss"]] == [3, 6, 7]


def test_pretrain_reports_to_tensorboard_from_the_command_line(tmp_path, tiny_model_dir, tiny_corpus):
    pytest.importorskip("tensorboard")
    output = tmp_path / "run"
    assert main(["pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus), "--output", str(output),
                 "--max-steps", "2", "--batch-size", "2", "--max-length", "32", "--log-every", "1",
                 "--save-every", "0", "--report-to", "tensorboard"]) == 0
    scalars = tensorboard_scalars(output / TENSORBOARD_DIR)
    assert [step for step, _ in scalars["decoder"]] == [1, 2] and "encoder_mlm" in scalars


def test_a_tracker_without_its_package_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="--report-to wandb: the wandb package is not installed; pip install wandb"):
        check_installed(["wandb"])
    with pytest.raises(ConfigError, match="the mlflow package"):
        settings(tmp_path, report_to=["mlflow"])


@pytest.mark.parametrize("command", ["pretrain", "finetune", "train-reranker"])
def test_every_training_command_offers_report_to(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert f"--report-to {{{','.join(TRACKERS)}}}" in " ".join(capsys.readouterr().out.split())
