"""Hostile inputs of issue 34, one class per section: non-finite numbers (options, files, losses, weights, vectors),
a cross-encoder without a trained head, length options outside what the tokenizer and model honour, empty queries
and judgments without a relevant document. docs/reliability.md lists each case with the test that shows it."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_sentences, tiny_beir
from torch import nn

from retromae.cli import build_parser, discover_commands, main
from retromae.data.corpus import iter_corpus
from retromae.data.retrieval_sets import (
    load_qrels,
    load_queries,
    load_retrieval_set,
    load_sts_pairs,
    read_trec_run,
    write_trec_run,
)
from retromae.data.training_groups import TrainingExample, TrainingSet, load_training_file
from retromae.evaluation.experiments import read_variant
from retromae.finetuning.negatives import load_latest_negatives
from retromae.models.encoder import Encoder
from retromae.models.export import export_encoder
from retromae.models.finite import check_vectors
from retromae.pretraining.config import PretrainConfig
from retromae.retrieval.encode import encode_to_dir, load_embeddings
from retromae.retrieval.index import ExactIndex, load_index, save_index
from retromae.runtime.errors import DataError, ModelLoadError, NonFiniteError
from retromae.runtime.lines import read_json_file
from retromae.runtime.options import ConfigError, build_config
from retromae.training import Trainer, TrainingConfig, checkpoints_by_step

# 1. Non-finite numbers: options, numbers read from files, training losses, weights and vectors.


def float_options() -> list[tuple[str, str]]:
    """(command, --flag) of every float option of every command."""
    found = []
    for command in discover_commands():
        parser = build_parser([command.name])
        sub = next(a for a in parser._actions if a.dest == "command").choices[command.name]
        found += [(command.name, action.option_strings[-1]) for action in sub._actions if action.metavar == "X"]
    return found


def test_every_float_option_of_every_command_refuses_nan_and_infinity(capsys):
    options = float_options()
    assert ("pretrain", "--learning-rate") in options and ("bm25", "--k1") in options and len(options) >= 15
    for index, (command, flag) in enumerate(options):
        value = ("nan", "inf", "-inf")[index % 3]
        assert main([command, f"{flag}={value}"]) == 2, (command, flag)
        error = capsys.readouterr().err.strip()
        assert error == f"retromae: error: {flag}: must be a finite number, got {float(value)}", (command, error)


def test_non_finite_values_of_config_files_and_the_python_api_are_refused(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("model: m\ncorpus: [c]\noutput: o\nweight_decay: nan\n")  # read as --weight-decay nan is
    with pytest.raises(ConfigError, match="--weight-decay: must be a finite number, got nan"):
        build_config(PretrainConfig, {"config": config})
    config = tmp_path / "run.json"
    config.write_text('{"model": "m", "corpus": ["c"], "output": "o", "max_steps": Infinity}')
    with pytest.raises(ConfigError, match="run.json: the number Infinity is not finite"):  # JSON's parser says it
        build_config(PretrainConfig, {"config": config})
    with pytest.raises(ConfigError, match="--learning-rate: must be a finite number, got inf"):
        PretrainConfig(model="m", corpus=["c"], output="o", learning_rate=float("inf"))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


TRAINING = '{"query": "q", "pos": ["p"], "neg": ["n"], "pos_scores": [1.0], "neg_scores": [%s]}\n'


@pytest.mark.parametrize("name, text, reader, message", [
    ("train.jsonl", TRAINING % "0.5" + TRAINING % "NaN", load_training_file, r":2: the number NaN is not finite"),
    ("train.jsonl", TRAINING % "Infinity", load_training_file, r":1: the number Infinity is not finite"),
    ("train.jsonl", TRAINING % "-Infinity", load_training_file, r":1: the number -Infinity is not finite"),
    ("train.jsonl", TRAINING % "1e999", load_training_file, r":1: the number 1e999 is not finite"),
    ("train.jsonl", TRAINING % ("1" + "0" * 400), load_training_file,
     r":1: a score of 'neg_scores' '100000000000\.\.\. \(401 characters\)' is not finite"),
    ("corpus.jsonl", '{"id": "1", "text": "a", "year": NaN}\n', lambda p: list(iter_corpus(p)),
     r":1: the number NaN is not finite"),
    ("sts.csv", "g\tf\t2012\t1\tnan\tA\tB\n", load_sts_pairs, r":1: score 'nan' is not finite"),
    ("sts.csv", "g\tf\t2012\t1\t2.5\tA\tB\ng\tf\t2012\t1\tinf\tA\tB\n", load_sts_pairs, r":2: score 'inf' is not"),
    ("run.trec", "q1 Q0 d1 1 0.5 x\nq1 Q0 d2 2 NaN x\n", read_trec_run, r":2: score 'NaN' is not finite"),
    ("run.trec", "q1 Q0 d1 1 -Infinity x\n", read_trec_run, r":1: score '-Infinity' is not finite"),
    ("qrels.tsv", "query-id\tcorpus-id\tscore\nq1\td1\tnan\n", load_qrels, r":2: relevance grade 'nan' is not an"),
    ("qrels.tsv", "q1 0 d1 1" + "0" * 400 + "\n", load_qrels, r":1: relevance grade '100000000000\.\.\. \(401 char"),
])
def test_non_finite_numbers_in_files_name_the_file_and_line(tmp_path, name, text, reader, message):
    path = write(tmp_path / name, text)
    with pytest.raises(DataError, match=f"{name}{message}"):
        reader(path)


def test_an_embeddings_file_with_a_nan_vector_names_the_file_and_the_id(tmp_path, tiny_model_dir):
    encoder = Encoder.load(tiny_model_dir, device="cpu")
    folder = encode_to_dir(encoder, ["a", "b", "c"], make_sentences(3), tmp_path / "emb", show_progress=False)
    vectors = np.load(folder / "embeddings.npy")
    vectors[1, 3] = np.nan
    np.save(folder / "embeddings.npy", vectors)
    with pytest.raises(NonFiniteError, match=r"emb/embeddings.npy: 1 of 3 vectors hold NaN .*the first: id 'b'"):
        load_embeddings(folder)
    assert main(["index", "--embeddings", str(folder), "--output", str(tmp_path / "index")]) == 2


@pytest.mark.parametrize("text, message", [
    ('{"dim": NaN}', "the number NaN is not finite"),
    ('{"dim": 1e999}', "the number 1e999 is not finite"),
    ('{"dim": ', "not valid JSON"),
    ("[1, 2]", "holds a JSON list, not an object"),
])
def test_a_json_file_of_a_run_folder_is_read_as_a_hostile_file(tmp_path, text, message):
    with pytest.raises(DataError, match=f"info.json: {message}"):
        read_json_file(write(tmp_path / "info.json", text))
    assert read_json_file(write(tmp_path / "list.json", "[1, 2]"), list) == [1, 2]


@pytest.fixture()
def numpy_index(tmp_path) -> Path:
    index = ExactIndex(4)
    index.add(np.eye(4, dtype=np.float32)[:3])
    save_index(index, tmp_path / "index", ["a", "b", "c"])
    return tmp_path / "index"


@pytest.mark.parametrize("change, message", [
    (lambda info: {**info, "dim": float("nan")}, "index.json: the number NaN is not finite"),
    (lambda info: {**info, "backend": "pickle"}, "index.json: backend 'pickle' and metric 'ip': not an index desc"),
    (lambda info: {key: value for key, value in info.items() if key != "metric"}, "and metric None: not an index"),
])
def test_an_index_description_that_is_not_ours_is_refused_naming_it(numpy_index, change, message):
    info = json.loads((numpy_index / "index.json").read_text())
    (numpy_index / "index.json").write_text(json.dumps(change(info)))  # json.dumps writes NaN as JSON's NaN
    with pytest.raises(DataError, match=message):
        load_index(numpy_index)


def test_index_vectors_that_are_not_float_rows_are_refused_naming_the_file(numpy_index):
    np.save(numpy_index / "index.npy", np.zeros((3, 4), dtype=np.int64))
    with pytest.raises(DataError, match=r"index.npy: was replaced after the index was written"):
        load_index(numpy_index)  # not the file index.json recorded: another generation
    info = json.loads((numpy_index / "index.json").read_text())
    del info["files"]  # as an index written before generations were recorded
    (numpy_index / "index.json").write_text(json.dumps(info))
    with pytest.raises(DataError, match=r"index.npy: holds int64 of shape \(3, 4\), not float32 of shape \(3, 4\)"):
        load_index(numpy_index)


def test_an_evaluation_score_that_is_not_a_finite_number_is_refused_by_the_report(tmp_path):
    write(tmp_path / "variant" / "eval" / "scifact.json", '{"ndcg@10": NaN}')
    with pytest.raises(DataError, match="scifact.json: the number NaN is not finite"):
        read_variant(tmp_path / "variant")
    write(tmp_path / "variant" / "eval" / "scifact.json", '{"ndcg@10": "nan"}')
    with pytest.raises(DataError, match="scifact.json: 'ndcg@10' is 'nan', not a number"):
        read_variant(tmp_path / "variant")


@pytest.mark.parametrize("saved", ["[[1], [7]]", "[[1]]", '[[1], ["b"]]', "[[1], [NaN]]"])
def test_saved_negatives_that_do_not_fit_the_training_set_are_refused(tmp_path, saved):
    data = TrainingSet(texts=["a", "b", "c"], ids=["a", "b", "c"],
                       examples=[TrainingExample("q1", [0]), TrainingExample("q2", [0])])
    write(tmp_path / "negatives" / "step-4.json", saved)
    with pytest.raises(DataError, match="step-4.json: "):
        load_latest_negatives(data, tmp_path, 10)
    write(tmp_path / "negatives" / "step-4.json", "[[1], [2]]")
    assert load_latest_negatives(data, tmp_path, 10) == 4
    assert [example.negatives for example in data.examples] == [[1], [2]]


def test_no_run_file_is_written_with_a_non_finite_score(tmp_path):
    path = tmp_path / "run.trec"
    with pytest.raises(NonFiniteError, match=r"run.trec: not written: the score of document 'd2' for query 'q1' is "
                                             "nan"):
        write_trec_run({"q1": {"d1": 0.5, "d2": float("nan")}}, path)
    assert not path.exists()


class Regression(nn.Module):
    """A linear regression whose data may hold a NaN row: its loss is then NaN, as with a corrupt batch."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        error = (self.linear(batch["x"]).squeeze(-1) - batch["y"]).pow(2).mean()
        return {"loss": error}


def regression_rows(bad_row: int | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    inputs = torch.randn(40, 4, generator=torch.Generator().manual_seed(5))
    if bad_row is not None:
        inputs[bad_row, 0] = float("nan")
    return [(row, row.sum()) for row in inputs]


def collate(rows: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {"x": torch.stack([x for x, _ in rows]), "y": torch.stack([y for _, y in rows]),
            "attention_mask": torch.ones(len(rows), 2)}


def in_order(rank: int, world: int, start: int):
    """Micro-batch i holds rows 4i..4i+3, so that a bad row is met at a known step."""
    return ([4 * i + j for j in range(4)] for i in range(start, 10))


def regression_trainer(tmp_path, bad_row: int | None, **options) -> Trainer:
    values = {"output": str(tmp_path / "run"), "max_steps": 8, "batch_size": 4, "learning_rate": 0.01, "log_every": 3,
              "save_every": 3, "seed": 1, **options}
    (tmp_path / "run").mkdir(exist_ok=True)
    return Trainer(Regression(), regression_rows(bad_row), collate, TrainingConfig(**values), batch_sampler=in_order)


def test_a_nan_loss_stops_training_naming_the_step_and_the_last_good_checkpoint(tmp_path):
    trainer = regression_trainer(tmp_path, bad_row=17)  # micro-batch 4: step 5, inside the window of steps 4-6
    with pytest.raises(NonFiniteError) as stopped:
        trainer.run()
    message = str(stopped.value)
    assert message.startswith("training stopped at step 5: a non-finite loss (loss nan)")
    assert "the last good checkpoint is" in message and "step-0000003 (step 3" in message
    assert [step for step, _ in checkpoints_by_step(tmp_path / "run")] == [3]  # none of the NaN weights at step 6
    assert all(record["step"] <= 3 for record in map(json.loads, (tmp_path / "run" / "metrics.jsonl").open()))


def test_non_finite_weights_are_never_checkpointed(tmp_path):
    def poison(trainer: Trainer) -> None:  # an update that overflowed, its loss still finite
        if trainer.state.step == 2:
            with torch.no_grad():
                trainer.unwrapped_model.linear.weight[0, 0] = float("inf")

    trainer = regression_trainer(tmp_path, bad_row=None, max_steps=2, save_every=0)
    trainer.on_step = poison
    with pytest.raises(NonFiniteError, match=r"stopped after step 2: the weights hold NaN or infinite values "
                                             r"\(linear.weight\); no checkpoint written; nothing was exported"):
        trainer.run()


def test_a_probe_meeting_nan_vectors_stops_the_run_as_a_nan_loss_does(tmp_path):
    def probe(trainer: Trainer) -> dict[str, float]:  # weights that turned NaN at this step, the loss still finite
        weight = trainer.unwrapped_model.linear.weight
        if trainer.state.step == 6:
            with torch.no_grad():
                weight[0, 1] = float("nan")
        check_vectors(weight.detach().numpy(), "the vectors of the encoder")
        return {"probe": 1.0}

    trainer = regression_trainer(tmp_path, bad_row=None)
    trainer.log_extra = probe
    with pytest.raises(NonFiniteError, match=r"^training stopped after step 6: the vectors of the encoder: 1 of 1 "
                                             r"vectors hold NaN .*the last good checkpoint is .*step-0000003"):
        trainer.run()


def test_pretrain_with_a_diverging_learning_rate_exits_2_and_exports_nothing(tiny_model_dir, tiny_corpus, tmp_path,
                                                                             capsys):
    output = tmp_path / "run"
    args = ["pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus), "--output", str(output),
            "--max-steps", "6", "--batch-size", "4", "--max-length", "32", "--log-every", "1", "--save-every", "1",
            "--learning-rate", "1e30", "--cache-dir", str(tmp_path / "cache")]
    assert main(args) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("retromae: error: training stopped at step 2: a non-finite loss")
    assert "step-0000001 (step 1); nothing was exported" in error
    assert not (output / "encoder").exists() and [s for s, _ in checkpoints_by_step(output)] == [1]


@pytest.fixture()
def nan_model(tiny_model_dir, tmp_path) -> Path:
    """The tiny model with one NaN weight, saved as a model folder."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.embeddings.word_embeddings.weight[5, 0] = float("nan")
    folder = tmp_path / "nan-model"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    return folder


def test_a_model_with_nan_weights_is_neither_encoded_evaluated_scored_nor_exported(nan_model, tmp_path, capsys):
    beir = tmp_path / "beir"
    tiny_beir(beir)
    for args in (["encode", "--corpus", str(beir / "corpus.jsonl"), "--output", str(tmp_path / "emb")],
                 ["evaluate", "--data", str(beir)],
                 ["mine", "--data", str(beir), "--output", str(tmp_path / "mined.jsonl")],
                 ["pretrain", "--corpus", str(beir / "corpus.jsonl"), "--output", str(tmp_path / "run"),
                  "--cache-dir", str(tmp_path / "cache")]):
        assert main([*args, "--model", str(nan_model)]) == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"retromae: error: {nan_model}: 1 weight tensors hold NaN or infinite values")
        assert len(error.splitlines()) == 1
    assert not (tmp_path / "emb" / "embeddings.npy").exists() and not (tmp_path / "mined.jsonl").exists()
    assert not (tmp_path / "run").exists()
    from transformers import AutoModel, AutoTokenizer

    with pytest.raises(NonFiniteError, match="out/encoder: not exported: 1 weight tensors hold NaN"):
        export_encoder(AutoModel.from_pretrained(nan_model), AutoTokenizer.from_pretrained(nan_model),
                       tmp_path / "out" / "encoder")
    assert not (tmp_path / "out" / "encoder").exists()


def test_a_model_config_holding_nan_is_refused(tiny_model_dir, tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    for file in tiny_model_dir.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "layer_norm_eps": float("nan")}))  # written as NaN
    assert main(["encode", "--model", str(folder), "--queries", str(write(tmp_path / "q.tsv", "1\ta b\n")),
                 "--output", str(tmp_path / "emb")]) == 2
    assert capsys.readouterr().err.strip() == (f"retromae: error: {folder / 'config.json'}: the number NaN is not "
                                               "finite (NaN or infinite)")


def test_nan_vectors_never_leave_an_encoder(tiny_model_dir, tmp_path):
    encoder = Encoder.load(tiny_model_dir, device="cpu")
    with torch.no_grad():  # weights that overflow in the forward pass only: float32 infinities in the last layer
        encoder.model.encoder.layer[-1].output.dense.weight.fill_(3e38)
    with pytest.raises(NonFiniteError, match="the vectors of .*: 2 of 2 vectors hold NaN or infinite values"):
        encoder.encode(["a b c", "d e"], show_progress=False)


# 2. A cross-encoder without a trained classifier head.


def test_score_refuses_a_model_without_a_trained_classifier_head(tiny_model_dir, tmp_path, capsys):
    data = write(tmp_path / "train.jsonl", '{"query": "q", "pos": ["p"], "neg": ["n"]}\n')
    args = ["score", "--model", str(tiny_model_dir), "--data", str(data), "--output", str(tmp_path / "scored.jsonl")]
    assert main(args) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"retromae: error: --model {tiny_model_dir}: not a trained cross-encoder: it has no "
                            "classifier head (classifier.bias, classifier.weight would start random")
    assert len(error.splitlines()) == 1 and not (tmp_path / "scored.jsonl").exists()


def test_a_trained_head_is_accepted(tiny_model_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from retromae.reranking.run import CrossEncoder

    folder = tmp_path / "reranker"
    AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    scores = CrossEncoder(str(folder), "cpu", 32).score(["a b", "c"], ["d e f", "g"], show_progress=False)
    assert scores.shape == (2,) and np.isfinite(scores).all()
    long_query = " ".join(["word"] * 100)  # longer than the pair's 32 tokens by itself
    scores = CrossEncoder(str(folder), "cpu", 32).score([long_query, "c"], ["d e f", "g"], show_progress=False)
    assert scores.shape == (2,) and np.isfinite(scores).all()
    with pytest.raises(ModelLoadError, match="not a trained cross-encoder"):
        CrossEncoder(str(tiny_model_dir), "cpu", 32)


# 3. Length options against the tokenizer's minimum and the model's positions (128 in the tiny model).


@pytest.fixture()
def retrieval_inputs(tiny_model_dir, tmp_path) -> dict[str, Path]:
    beir = tmp_path / "beir"
    tiny_beir(beir)
    training = write(tmp_path / "train.jsonl", "".join(json.dumps({"query": t[:20], "pos": [t], "neg": [t[::-1]]})
                                                       + "\n" for t in make_sentences(6)))
    encoder = Encoder.load(tiny_model_dir, device="cpu")
    embeddings = encode_to_dir(encoder, ["d0", "d1"], make_sentences(2), tmp_path / "emb", show_progress=False,
                               model_name=str(tiny_model_dir))
    assert main(["index", "--embeddings", str(embeddings), "--output", str(tmp_path / "index")]) == 0
    return {"beir": beir, "training": training, "index": tmp_path / "index", "out": tmp_path / "out"}


@pytest.mark.parametrize("option, value, message", [
    ("--query-max-length", "1", "the tokenizer adds 2 special tokens to each text, so at least 3 tokens are needed "
                                "to keep any text; give 3 or more"),
    ("--passage-max-length", "916", "the model reads at most 128 tokens (its position embeddings); give 128 or less"),
])
def test_every_command_checks_its_length_options(tiny_model_dir, retrieval_inputs, capsys, option, value, message):
    model, paths = str(tiny_model_dir), retrieval_inputs
    out = str(paths["out"])
    commands = {
        "encode": ["--corpus" if "passage" in option else "--queries",
                   str(paths["beir"] / ("corpus.jsonl" if "passage" in option else "queries.jsonl")), "--output", out],
        "evaluate": ["--data", str(paths["beir"])],
        "mine": ["--data", str(paths["beir"]), "--output", out],
        "finetune": ["--data", str(paths["training"]), "--output", out, "--max-steps", "1"],
    }
    if "query" in option:
        commands["search"] = ["--index", str(paths["index"]), "--queries", str(paths["beir"] / "queries.jsonl"),
                              "--output", out]
    for command, args in commands.items():
        assert main([command, "--model", model, *args, option, value]) == 2, command
        error = capsys.readouterr().err.strip()
        if command == "finetune" and value == "1":  # its own floor, 4, refused before the model loads
            assert error == f"retromae: error: {option}: must be at least 4, got 1"
        else:
            assert error == f"retromae: error: {option} {value}: {message}", (command, error)
        assert not paths["out"].exists(), command


@pytest.mark.parametrize("declared", [1, 0, -5, 2.5, "64"])
def test_a_folder_declaring_an_unusable_max_length_is_refused(tiny_model_dir, tmp_path, declared):
    from transformers import AutoModel, AutoTokenizer

    folder = tmp_path / "encoder"
    AutoModel.from_pretrained(tiny_model_dir).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    (folder / "retromae_encoder.json").write_text(json.dumps({"pooling": "cls", "max_length": declared}))
    with pytest.raises(ModelLoadError, match=f"encoder: its metadata declares a max length of {declared!r} tokens; "
                                             "it must be a whole number of at least 3"):
        Encoder.load(folder, device="cpu")


def test_cross_encoder_lengths_are_checked_as_pairs(tiny_model_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from retromae.reranking.run import CrossEncoder

    folder = tmp_path / "reranker"
    AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    with pytest.raises(ConfigError, match="--max-length 1000: the model reads at most 128 tokens"):
        CrossEncoder(str(folder), "cpu", 1000)
    with pytest.raises(ConfigError, match="--max-length 4: the tokenizer adds 3 special tokens to each pair"):
        CrossEncoder(str(folder), "cpu", 4)


# 4. Empty queries and judgments without a relevant document.


def test_empty_queries_are_refused_with_the_first_line_and_the_count(tmp_path, tiny_model_dir, capsys):
    beir = tmp_path / "beir"
    tiny_beir(beir)
    lines = (beir / "queries.jsonl").read_text().splitlines()
    for number in (40, 42, 44):  # three test queries (q36-q47 are the test split) without text
        lines[number] = json.dumps({"_id": f"q{number}", "text": " "})
    (beir / "queries.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"queries.jsonl:41: query 'q40' has no text \(3 of the 48 queries have "
                                        "none\\); an empty query finds nothing"):
        load_retrieval_set(beir, "test")
    write(tmp_path / "queries.tsv", "1\tfine\n2\t\n")
    with pytest.raises(DataError, match=r"queries.tsv:2: query '2' has no text \(1 of the 2"):
        load_queries(tmp_path / "queries.tsv")
    for args in (["evaluate", "--data", str(beir), "--model", str(tiny_model_dir)],
                 ["mine", "--data", str(beir), "--split", "test", "--negatives", "bm25", "--output",
                  str(tmp_path / "mined.jsonl")]):
        assert main(args) == 2
        assert "queries.jsonl:41: query 'q40' has no text" in capsys.readouterr().err
    assert not (tmp_path / "mined.jsonl").exists()


def test_a_training_file_with_an_empty_query_is_refused(tmp_path, capsys):
    data = write(tmp_path / "train.jsonl", '{"query": "q", "pos": ["p"], "neg": ["n"]}\n'
                                           '{"query": "", "pos": ["p"], "neg": ["n"]}\n')
    with pytest.raises(DataError, match=r"train.jsonl:2: 'query' is empty"):
        load_training_file(data)
    assert main(["mine", "--data", str(data), "--negatives", "bm25", "--output", str(tmp_path / "out.jsonl")]) == 2
    assert "train.jsonl:2: 'query' is empty" in capsys.readouterr().err and not (tmp_path / "out.jsonl").exists()


def test_queries_without_a_positive_grade_are_left_out_with_one_warning(tmp_path, caplog):
    beir = tmp_path / "beir"
    tiny_beir(beir)
    rows = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t{0 if i in (37, 39) else 1}" for i in range(36, 48)]
    (beir / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")
    with caplog.at_level(logging.WARNING):
        data = load_retrieval_set(beir, "test")
    assert sorted(data.queries) == sorted(f"q{i}" for i in range(36, 48) if i not in (37, 39))
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and warnings[0].endswith("test.tsv:3: 2 of 12 queries (the first: 'q37') judge no "
                                                       "document above 0; they are left out (every ranking would "
                                                       "score 0 on them)")


def test_qrels_whose_grades_are_all_zero_are_refused(tmp_path, tiny_model_dir, capsys):
    beir = tmp_path / "beir"
    tiny_beir(beir)
    rows = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t0" for i in range(36, 48)]
    (beir / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")
    assert main(["evaluate", "--model", str(tiny_model_dir), "--data", str(beir)]) == 2
    assert "test.tsv: no judgment has a grade above 0" in capsys.readouterr().err
