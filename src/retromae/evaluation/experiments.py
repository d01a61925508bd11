"""Gathering experiment runs into one table and two plots (`retromae report`).

Owns: reading a variant folder laid out by the recipes and turning a list of them into `report.md`,
`report.json`, `pretrain-loss.png`, `metrics.png` and, when the runs probed retrieval while pre-training,
`probe-curves.png` (with `evaluation.curves`). A variant folder holds, each part optional:

    pretrain/        a `retromae pretrain` output (config.json, metrics.jsonl, with probe scores if any)
    finetune/        a `retromae finetune` output (config.json, metrics.jsonl)
    eval/NAME.json   `retromae evaluate --output` files (.json in any case); NAME prefixes the metric columns (the
                     metric registry's reported keys: ndcg@10, recall@100, spearman)
    eval/NAME/       an `evaluate --output` folder: its results.json's model (NAME, or NAME/SET with several sets),
                     BM25 and hybrid beside it ("NAME BM25", "NAME hybrid"); one model a table
    times.txt        one "STAGE SECONDS" line per timed stage

or is a `retromae adapt` output folder (guard.json, training/ as pretrain/ above): its pre-training column names the
training stage and the candidate the guard chose, its columns `guard base METRIC` and `guard chosen METRIC` (the
validation scores of the base and of what was exported; `guard finetuned METRIC` with `adapt --train`), beside its
eval/*.json if any.

A column compares one data set and split, as the evaluation files record them (`comparable_columns`: columns of
their own where they differ, with a warning). A row is named by its folder, with as many parent folders as tell it
from the others (`names.distinct_names`), and report.json keeps its folder's path.

`report(config)` is `retromae report` itself: the output folder claimed, the report written and printed. Does not
own running experiments, nor computing metrics, nor what `adapt` writes (`retromae.adaptation.run`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retromae.evaluation.axes import clamp_axis
from retromae.evaluation.curves import PROBE_PREFIX, ProbePoint, plot_probe_curves, probe_points, probe_section
from retromae.evaluation.metric_registry import reported_keys, show
from retromae.evaluation.names import BM25, distinct_names
from retromae.objectives import OBJECTIVES
from retromae.objectives.summary import describe_pretraining
from retromae.runtime.console import Result, given, notice
from retromae.runtime.errors import DataError, RetroMAEError
from retromae.runtime.io import write_text_atomic
from retromae.runtime.lines import (
    SHORT_LINE_BYTES,
    finite_number,
    numbered_lines,
    numbered_records,
    quoted,
    read_json_file,
)
from retromae.runtime.run_folder import claim_folder, input_paths, mark_started, run_identity

if TYPE_CHECKING:
    from retromae.evaluation.config import ReportConfig

REPORT_FILES = ("report.md", "report.json", "pretrain-loss.png", "metrics.png")
TABLE_FILE = "results.json"  # what `retromae evaluate --output FOLDER` writes its table's scores into
GUARD_FILE = "guard.json"  # what `retromae adapt` writes (adapt.run.GUARD_FILE; not imported: it loads torch)
WHOLE_FIELDS = ("step", "tokens")  # the fields of a metrics.jsonl record read as whole numbers
LOSS_FIELDS = ("loss", "encoder_mlm")  # and as numbers, beside the probe scores (`curves.PROBE_PREFIX`)


@dataclass
class Variant:
    """What one variant folder recorded; `path`: the folder's absolute path (links not followed), what tells two
    rows apart; `measured`: each column NAME's file and what it measured (`Cell.about`)."""

    name: str
    path: str
    pretraining: str
    pretrain_losses: list[tuple[int, float]]
    encoder_mlm_losses: list[tuple[int, float]] = field(default_factory=list)  # comparable across objectives
    scores: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    probes: list[ProbePoint] = field(default_factory=list)
    measured: dict[str, dict[str, str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Cell:
    """One score of an evaluation file: its column's NAME (the part before the metric) and metric, the data set and
    split the file records it was measured on (None where the file records none), and the file."""

    name: str
    metric: str
    data: str | None
    split: str | None
    value: float
    path: Path

    @property
    def column(self) -> str:
        return f"{self.name} {self.metric}"

    def about(self) -> dict[str, str | None]:
        return {"file": str(self.path), "data": self.data, "split": self.split}


def metric_columns(variants: list[Variant]) -> list[str]:
    """Every metric column any variant has, in first-seen order."""
    return list(dict.fromkeys(column for variant in variants for column in variant.scores))


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
    # matplotlib: only when a plot is drawn (hundreds of milliseconds); the backend must be set before pyplot loads
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def read_metrics(metrics: Path) -> list[dict]:
    """The records of a training run's metrics.jsonl (a last record cut by a kill left out), each checked
    (`_checked_record`)."""
    return [_checked_record(metrics, number, record) for number, record in numbered_records(metrics)[0]]


def _checked_record(path: Path, number: int, record: Any) -> dict:
    """A metrics.jsonl record: a JSON object with a whole-number step, and each field read from it (`WHOLE_FIELDS`,
    `LOSS_FIELDS`, the probe scores) a finite number; DataError naming the file, line and field otherwise."""
    if not isinstance(record, dict):
        raise DataError(f"{path}:{number}: expected a JSON object of a training step, got {quoted(record)}")
    if "step" not in record:
        raise DataError(f"{path}:{number}: has no field 'step'")
    for key, value in record.items():
        if key in WHOLE_FIELDS or key in LOSS_FIELDS or key.startswith(PROBE_PREFIX):
            _json_number(path, number, key, value, whole=key in WHOLE_FIELDS)
    return record


def _json_number(path: Path, number: int, key: str, value: Any, whole: bool = False) -> float:
    """A number read from line `number` of `path`: a JSON number (not text, not true or false; a whole one of at
    least 0 with `whole`), finite (`lines.finite_number`); DataError naming the file, line and field otherwise."""
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or (whole and value < 0):
        wanted = "a whole number of at least 0" if whole else "a number"
        raise DataError(f"{path}:{number}: field {quoted(key)} is {quoted(value)}, not {wanted}")
    return finite_number(path, number, value, f"field {quoted(key)}")


def losses(records: list[dict], key: str = "loss") -> list[tuple[int, float]]:
    """(step, value of `key`: the total loss or one component) of every training record of a metrics.jsonl."""
    return [(record["step"], float(record[key])) for record in records if key in record]


def read_times(path: Path) -> dict[str, float]:
    """STAGE → seconds from a times.txt (a stage timed twice keeps its last time), each a finite number of at least
    0 (`lines.finite_number`): DataError naming the file and line otherwise."""
    times = {}
    for number, line in numbered_lines(path, line_bytes=SHORT_LINE_BYTES):
        fields = line.split()
        if len(fields) != 2:
            raise DataError(f"{path}:{number}: expected 'STAGE SECONDS', got {quoted(line)}")
        seconds = finite_number(path, number, fields[1], "seconds")
        if seconds < 0:
            raise DataError(f"{path}:{number}: seconds {quoted(fields[1])} is negative")
        times[fields[0]] = seconds
    return times


def read_variant(folder: Path, name: str | None = None) -> Variant:
    """Everything a variant folder holds, its row named `name` (the folder's name by default); a folder with none of
    the parts is an error."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: no such variant folder")
    adapted = (folder / GUARD_FILE).is_file()
    pretrain = folder / ("training" if adapted else "pretrain")
    records = read_metrics(pretrain / "metrics.jsonl") if (pretrain / "metrics.jsonl").exists() else []
    variant = Variant(
        name=name or folder.name, path=os.path.abspath(folder),
        pretraining=_pretraining_cell(pretrain),
        pretrain_losses=losses(records), encoder_mlm_losses=losses(records, "encoder_mlm"),
        probes=probe_points(records))
    for cell in variant_cells(folder):
        variant.scores[cell.column] = cell.value
        variant.measured[cell.name] = cell.about()
    if adapted:
        read_guard(folder / GUARD_FILE, variant)
    if (folder / "times.txt").exists():
        variant.seconds = read_times(folder / "times.txt")
    if not (variant.scores or variant.pretrain_losses or variant.seconds):
        raise DataError(f"{folder}: holds no pretrain/, eval/*.json, eval/*/{TABLE_FILE} or times.txt")
    return variant


def eval_files(folder: Path) -> list[tuple[str, Path]]:
    """A variant's evaluations, (NAME, file): `evaluate --output` files, eval/NAME.json (.JSON or any case alike),
    and `evaluate --output` folders, eval/NAME/results.json."""
    found = []
    for path in sorted((folder / "eval").iterdir()) if (folder / "eval").is_dir() else []:
        if path.suffix.lower() == ".json" and path.is_file():
            found.append((path.stem, path))
        elif (path / TABLE_FILE).is_file():
            found.append((path.name, path / TABLE_FILE))
    return found


def variant_cells(folder: Path) -> list[Cell]:
    """Every score of a variant's evaluations (`eval_files`); DataError where two files give one column."""
    cells: dict[str, Cell] = {}
    for name, path in eval_files(folder):
        for cell in eval_cells(path, name):
            if cell.column in cells:
                raise DataError(f"{path}: gives column {quoted(cell.column)}, as {cells[cell.column].path} does; "
                                "keep one of them")
            cells[cell.column] = cell
    return list(cells.values())


def eval_cells(path: Path, name: str) -> list[Cell]:
    """The reported scores of one `retromae evaluate --output` result, of either layout: a file's (the metrics at the
    top level, beside "data" and "split") or a table folder's results.json (`_table_cells`); DataError for a JSON of
    neither, naming the file."""
    results = read_json_file(path)
    keys = reported_keys()
    if isinstance(results, dict) and "sets" in results:
        return _table_cells(path, name, results)
    if not isinstance(results, dict) or not any(key in results for key in keys):
        raise DataError(f"{path}: not a result of `retromae evaluate --output` (no 'sets', and none of "
                        f"{', '.join(keys)})")
    data, split = (_recorded(path, results, field) for field in ("data", "split"))
    return [Cell(name, key, data, split, _score(path, key, results[key]), path) for key in keys if key in results]


def _table_cells(path: Path, name: str, results: dict) -> list[Cell]:
    """The reported scores of a table folder's results.json: each set's (column NAME, or NAME/SET with several sets)
    of its model, and of BM25 and the hybrid beside it ("NAME BM25 METRIC", "NAME hybrid METRIC"); DataError naming
    the file for a table of several models (a row is one variant's) or not of this layout."""
    try:
        models, sets, split = list(results["models"]), results["sets"], _recorded(path, results, "split")
        if len(models) != 1:
            raise DataError(f"{path}: compares {len(models)} models ({', '.join(map(quoted, models))}); a report row "
                            "is one variant's: evaluate its model alone")
        cells = []
        for set_name, row in sets.items():
            column = name if len(sets) == 1 else f"{name}/{set_name}"
            data = _recorded(path, results["data"], set_name)
            for system in results["systems"]:
                role = "" if system == models[0] else " BM25" if system == BM25 else " hybrid"
                cells += [Cell(f"{column}{role}", key, data, split, _score(path, key, row[system][key]), path)
                          for key in reported_keys() if key in row[system]]
    except (KeyError, TypeError, AttributeError) as error:
        raise DataError(f"{path}: not the {TABLE_FILE} of `retromae evaluate --output FOLDER` (at {error})") from None
    return cells


def _recorded(path: Path, results: dict, field: str) -> str | None:
    """What an evaluation file records it measured (its "data" or "split"): text, or None where not recorded;
    DataError naming the file and field for anything else."""
    value = results.get(field)
    if value is not None and not isinstance(value, str):
        raise DataError(f"{path}: field {quoted(field)} is {quoted(value)}, not a path or split name")
    return value


def comparable_columns(variants: list[Variant]) -> None:
    """Owns what a metric column compares: one data set and split, as each cell's evaluation file records them. Where
    the variants' files of one NAME measured different ones, each (data, split) gets columns of its own, named by
    them ("sf ('d7/missq', split 'train') ndcg@10"), and a warning names the variants and what each measured."""
    for name in dict.fromkeys(name for variant in variants for name in variant.measured):
        measured = {v.name: _measured_on(v.measured[name]) for v in variants if name in v.measured}
        if len(set(measured.values())) < 2:
            continue
        shown = "; ".join(f"{variant}: {on}" for variant, on in measured.items())
        notice(f"retromae: warning: the {quoted(name)} columns were measured on different data ({shown}); each is "
               "shown in columns of its own")
        for variant in variants:
            if name in variant.measured:
                _rename(variant, name, f"{name} ({measured[variant.name]})")


def _measured_on(about: dict[str, str | None]) -> str:
    """A column's data set and split as a column's name and a warning show them."""
    data, split = about["data"], about["split"]
    return ", ".join([quoted(data) if data is not None else "data not recorded",
                      f"split {quoted(split)}" if split is not None else "split not recorded"])


def _rename(variant: Variant, name: str, new: str) -> None:
    """A variant's columns of one NAME renamed, in their place."""
    renamed = {}
    for column, value in variant.scores.items():
        owner, metric = column.rsplit(" ", 1)
        renamed[f"{new} {metric}" if owner == name else column] = value
    variant.scores = renamed
    variant.measured[new] = variant.measured.pop(name)


def read_guard(path: Path, variant: Variant) -> None:
    """An adapt folder's guard.json into `variant`: the validation scores of the base and of the chosen candidate
    (and of the fine-tuned model), and the choice in its pre-training column."""
    guard = read_json_file(path)
    try:
        metric, chosen = guard["metric"], guard["chosen"]
        scores = {candidate["name"]: candidate[metric] for candidate in guard["candidates"]}
        found = {"base": guard["base"], "chosen": scores[chosen]}
    except (KeyError, TypeError) as error:
        raise DataError(f"{path}: not a guard record of `retromae adapt` (missing {error})") from error
    if "finetuned" in guard:
        found["finetuned"] = guard["finetuned"]
    variant.scores.update({f"guard {name} {metric}": _score(path, metric, value) for name, value in found.items()})
    variant.pretraining = f"adapt: {variant.pretraining}; exported: {chosen}"


def _pretraining_cell(pretrain: Path) -> str:
    """The pre-training column: from its config.json; a metrics.jsonl alone (a run copied without its folder)
    says so."""
    if not pretrain.is_dir():
        return "none"
    path = pretrain / "config.json"
    if not path.exists():
        return f"unknown (no {pretrain.name}/config.json)"
    config = read_json_file(path)
    objective = config.get("objective")
    if not isinstance(objective, str) or objective not in list(OBJECTIVES):
        shown = f"is {quoted(objective)}" if "objective" in config else "is missing"
        raise DataError(f"{path}: field 'objective' {shown}, not one of {', '.join(OBJECTIVES)}")
    try:
        return describe_pretraining(config)
    except KeyError as error:
        raise DataError(f"{path}: has no field {error}: not the config.json of a `retromae pretrain` run") from None
    except (TypeError, ValueError, RetroMAEError) as error:
        raise DataError(f"{path}: not the config.json of a `retromae pretrain` run ({error})") from None


def _score(path: Path, metric: str, value: Any) -> float:
    """An evaluation's score as a float; DataError naming the file and metric when it is not a finite number (an
    integer beyond a float's range included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(f"{path}: {quoted(metric)} is {quoted(value)}, not a number")
    if isinstance(value, int) and abs(value) > sys.float_info.max:
        raise DataError(f"{path}: {quoted(metric)} is a whole number beyond a float's range, not a finite score")
    return float(value)


def _loss_cell(losses: list[tuple[int, float]]) -> str:
    return f"{losses[0][1]:.2f} → {losses[-1][1]:.2f}" if losses else "–"


def report_table(variants: list[Variant]) -> str:
    """A Markdown table: variant, pre-training, its loss, every metric column, minutes."""
    columns = metric_columns(variants)
    lines = ["| " + " | ".join(["variant", "pre-training", "pre-training loss", *columns, "minutes"]) + " |",
             "|---|---|---|" + "---:|" * (len(columns) + 1)]
    for variant in variants:
        # a column is "NAME KEY" (eval/NAME.json's metric KEY), printed in that metric's format
        cells = [show(c.rsplit(" ", 1)[-1], variant.scores[c]) if c in variant.scores else "–" for c in columns]
        minutes = f"{sum(variant.seconds.values()) / 60:.1f}" if variant.seconds else "–"
        lines.append("| " + " | ".join([variant.name, variant.pretraining, _loss_cell(variant.pretrain_losses),
                                         *cells, minutes]) + " |")
    return "\n".join(lines) + "\n"


def plot_pretrain_losses(variants: list[Variant], path: Path) -> None:
    """Pre-training loss against step, one line per variant that pre-trained: the objective's total and, when any
    variant logged one, the encoder's MLM loss (the one term every reconstruction objective shares)."""
    plt = pyplot()
    panels = [("pre-training loss (objective's total)", [v.pretrain_losses for v in variants])]
    if any(variant.encoder_mlm_losses for variant in variants):
        panels.append(("encoder MLM loss (nats per masked token)", [v.encoder_mlm_losses for v in variants]))
    figure, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4), squeeze=False)
    for axis, (label, curves) in zip(axes[0], panels, strict=True):
        for variant, curve in zip(variants, curves, strict=True):
            if curve:
                steps, values = zip(*curve, strict=True)
                axis.plot(steps, values, label=variant.name)
        axis.set(xlabel="step", ylabel=label)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_metrics(variants: list[Variant], path: Path) -> None:
    """One bar panel per metric column, a bar per variant."""
    plt = pyplot()
    columns = metric_columns(variants)
    figure, axes = plt.subplots(1, len(columns), figsize=(4 * len(columns), 3.5), squeeze=False)
    for axis, column in zip(axes[0], columns, strict=True):
        names = [v.name for v in variants if column in v.scores]
        metric_bars(axis, names, [v.scores[column] for v in variants if column in v.scores], column)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def metric_bars(axis: Any, names: list[str], values: list[float], title: str) -> None:
    """Horizontal bars of one metric, each labelled with its value (a 0.0000 bar has no length to see), on an axis
    from 0 (or, for a negative correlation, 30% of the span below it: the label has the minus sign too) to a fifth
    beyond the longest bar, room for its label (0 to 0.2 when every value is 0)."""
    bars = axis.barh(names, values)
    axis.bar_label(bars, fmt="%.4f", padding=3, fontsize=8)
    low, high = min(0.0, *values), max(0.0, *values)
    span = (high - low) or 1.0
    axis.set_xlim(low - 0.3 * span if low < 0 else 0.0, high + 0.2 * span)
    clamp_axis(axis, title, "x")  # a fraction's axis ends at 1.0
    axis.invert_yaxis()
    axis.set(title=title)


def read_variants(folders: list[Path]) -> list[Variant]:
    """The variant folders read, each row named by the shortest path that tells it from the others
    (`names.distinct_names`), their columns made comparable (`comparable_columns`)."""
    names = distinct_names([list(Path(os.path.abspath(folder)).parts) for folder in folders])
    variants = [read_variant(folder, name) for folder, name in zip(folders, names, strict=True)]
    comparable_columns(variants)
    return variants


def write_report(folders: list[Path], output: Path, title: str) -> str:
    """Read the variant folders, write the table (Markdown, JSON) and plots into `output`; returns the table."""
    variants = read_variants(folders)
    output.mkdir(parents=True, exist_ok=True)
    table = report_table(variants)
    curves = {variant.name: variant.probes for variant in variants if variant.probes}
    probes = f"\n{probe_section(curves)}" if curves else ""
    write_text_atomic(output / "report.md", f"# {title}\n\n{table}{probes}")
    write_text_atomic(output / "report.json", json.dumps([asdict(v) for v in variants], indent=2) + "\n")
    if any(variant.pretrain_losses for variant in variants):
        plot_pretrain_losses(variants, output / "pretrain-loss.png")
    if any(variant.scores for variant in variants):
        plot_metrics(variants, output / "metrics.png")
    if curves:
        plot_probe_curves(curves, output / "probe-curves.png", pyplot)
    return table + probes


def report(config: ReportConfig) -> Result:
    """Gather variant folders into a report as `config` says; returns the report folder (`retromae.report(...)`),
    the table and the line naming report.md."""
    claim_folder(config.output, "report", run_identity(config), REPORT_FILES, overwrite=config.overwrite,
                 inputs=input_paths(config), resumable=False, started=False)  # kept only whole (mark_started)
    table = write_report(config.variants, config.output, config.title)
    mark_started(config.output)
    return Result(Path(config.output), (table, f"report: {given(config.output / 'report.md')}"))
