"""Reporting a training run's scalars to experiment trackers (TensorBoard, W&B, MLflow, ...) through Accelerate.

Owns: the tracker names `--report-to` accepts, the check that a tracker's package is installed, starting
Accelerate's tracker classes (`accelerate.tracking`) on the main process with the run's options as its
hyper-parameters, and sending them every record `metrics.jsonl` gets: the same scalars at the same steps. Where each
writes: TensorBoard event files under OUTPUT/tensorboard/, Aim a repository in OUTPUT; W&B, MLflow and the others
their own stores (project or experiment "retromae", the run named after OUTPUT's folder). Does not own the records
themselves (`retromae.training.loop`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from retromae.runtime.options import ConfigError, config_to_dict

# --report-to name → (module the tracker imports, pip package that provides it).
TRACKERS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow"),
            "comet_ml": ("comet_ml", "comet-ml"), "aim": ("aim", "aim"), "clearml": ("clearml", "clearml"),
            "dvclive": ("dvclive", "dvclive"), "swanlab": ("swanlab", "swanlab"), "trackio": ("trackio", "trackio")}
PROJECT = "retromae"
TENSORBOARD_DIR = "tensorboard"


def check_installed(names: Sequence[str]) -> None:
    """ConfigError naming the first tracker whose package cannot be imported, and how to install it."""
    for name in names:
        module, package = TRACKERS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"--report-to {name}: the {package} package is not installed; pip install {package}")


def _tracker(name: str, output: Path) -> Any:
    """Accelerate's tracker `name`, told where (or under which project and run name) to write."""
    # accelerate: only when a tracker is asked for (--report-to)
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    tracker_class = LOGGER_TYPE_TO_CLASS[name]
    if name == "tensorboard":
        return tracker_class(TENSORBOARD_DIR, str(output))
    if name == "aim":
        return tracker_class(PROJECT, str(output))
    if name == "mlflow":
        return tracker_class(experiment_name=PROJECT, run_name=output.name)
    if name == "wandb":
        return tracker_class(PROJECT, name=output.name)
    return tracker_class(PROJECT)


def _hyperparameters(options: Mapping[str, Any]) -> dict[str, Any]:
    """A config as trackers accept hyper-parameters: bool, int, float, str or None (lists become text)."""
    plain = (bool, int, float, str, type(None))
    return {key: value if isinstance(value, plain) else str(value) for key, value in options.items()}


class Reporter:
    """The trackers of one run: started with its options, then sent every logged record; `finish` closes them."""

    def __init__(self, names: Sequence[str], output: str | Path, options: Mapping[str, Any]) -> None:
        check_installed(names)
        self.trackers = [_tracker(name, Path(output)) for name in names]
        for tracker in self.trackers:
            tracker.start()
            tracker.store_init_configuration(_hyperparameters(options))

    def log(self, record: Mapping[str, float]) -> None:
        """A `metrics.jsonl` record: every entry but `step` as a scalar at that step."""
        values = {key: value for key, value in record.items() if key != "step"}
        for tracker in self.trackers:
            tracker.log(values, step=int(record["step"]))

    def finish(self) -> None:
        for tracker in self.trackers:
            tracker.finish()


def start_reporter(config: Any) -> Reporter | None:
    """The trackers a training config names in `report_to`, started; None when it names none."""
    if not config.report_to:
        return None
    return Reporter(config.report_to, config.output, config_to_dict(config))
