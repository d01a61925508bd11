"""Round ten: `adapt` uses a prompted base as it is meant to be, everywhere in the run.

The prefixes of a run are `finetuning.run.training_prefixes`' (--query-prefix / --passage-prefix as given, else the
prompts the base's folder names), and every text the run encodes as a query or a passage gets them: the distillation's
teacher (the base's side of the hybrid) and student, the guard's base and candidates, the export's named prompts and
`--train`'s fine-tuning; so `evaluate` of OUTPUT/encoder gives the guard's figure of what it chose. The pre-training
objectives train on blocks of documents with none. `train-reranker --negatives model` mines with the options too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import error_line, tiny_beir
from test_adapt import topical_corpus
from test_round_nine_prompts import PROMPTS, prompted_folder

from retromae.adaptation import guard
from retromae.cli import main
from retromae.finetuning.batches import GroupCollator
from retromae.models import encoder as encoder_module
from retromae.models.encoder import Encoder

SIDES = {"query": "query: ", "passage": "passage: "}
GIVEN = {"query": "q: ", "passage": ""}
# run → objective, flags, the prefixes every stage puts
RUNS = {"distill, the base's prompts": ("distill", [], SIDES),
        "cropping, the base's prompts": ("cropping", [], SIDES),
        "distill, given, --train": ("distill", ["--query-prefix", "q: ", "--passage-prefix", ""], GIVEN)}


@pytest.fixture(scope="module")
def world(tiny_model_dir, tmp_path_factory) -> dict:
    """A prompted sentence-transformers folder (mean pooling), a corpus and a BEIR folder."""
    root = tmp_path_factory.mktemp("adapt10")
    tiny_beir(root / "beir")
    return {"model": prompted_folder(tiny_model_dir, root / "model", PROMPTS), "root": root,
            "corpus": topical_corpus(root / "corpus.jsonl", count=200), "beir": root / "beir"}


def last_candidate(base, scored, seed):
    """The guard's choice made the last candidate whatever its gain, so that a candidate is exported."""
    best = scored[-1]
    best.gain = guard.measure_gain(base.per_query, best.per_query, seed)
    return best


def adapt_argv(world, output: Path, objective: str, flags: list[str]) -> list[str]:
    distill = ["--distill-queries", "16", "--list-size", "4", "--distill-candidates", "4"] if objective == "distill" \
        else []
    train = ["--train", str(world["beir"])] if "--query-prefix" in flags else []
    return ["adapt", "--model", str(world["model"]), "--corpus", str(world["corpus"]), "--output", str(output),
            "--objective", objective, "--max-steps", "2", "--batch-size", "8", "--max-length", "32",
            "--validation-queries", "20", "--mix", "1", "--cache-dir", str(output.parent / "cache"), *distill, *train,
            *flags]


@pytest.fixture(scope="module", params=RUNS)
def run(request, world) -> dict:
    """One adapt run of RUNS, its candidate exported: its output, the prefixes every `Encoder.tokenize` call put,
    those the fine-tuning's batches put."""
    objective, flags, sides = RUNS[request.param]
    output = world["root"] / request.param.replace(",", "").replace(" ", "-")
    put, batches = set(), []
    tokenize, collate = Encoder.tokenize, GroupCollator.__call__
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encoder_module, "_PROMPTS_NOTED", set())
        patch.setattr(guard, "decide", last_candidate)
        patch.setattr(Encoder, "tokenize", lambda self, texts, max_length=None, prefix="": put.add(prefix) or tokenize(
            self, texts, max_length, prefix))
        patch.setattr(GroupCollator, "__call__", lambda self, groups: batches.append(self.prefixes) or collate(
            self, groups))
        assert main(adapt_argv(world, output, objective, flags)) == 0
    return {"output": output, "sides": sides, "put": put, "batches": batches, "train": "--query-prefix" in flags}


def test_every_text_the_run_encodes_gets_the_run_s_prefixes(run):
    """The teacher's candidates, the student's lists, the guard's queries and documents and `--train`'s scoring: each
    text tokenised as a query or a passage has its side's prefix, and no other is put."""
    assert run["put"] == set(run["sides"].values())
    assert run["batches"] == ([run["sides"]] * len(run["batches"]) if run["train"] else [])
    assert len(run["batches"]) >= (1 if run["train"] else 0)


def test_the_export_names_the_prefixes_the_guard_scored_with(run):
    """OUTPUT/encoder and OUTPUT/sentence-transformer name the run's prefixes as their prompts ('' none), and so does
    the fine-tuned export of --train."""
    from sentence_transformers import SentenceTransformer

    named = {side: prefix for side, prefix in run["sides"].items() if prefix}
    folders = ["encoder", "sentence-transformer"] + (["finetuned/encoder"] if run["train"] else [])
    for folder in folders:
        assert Encoder.load(run["output"] / folder, device="cpu").prompts == named, folder
    st = SentenceTransformer(str(run["output"] / "sentence-transformer"), device="cpu")
    assert st.prompts.get("query", "") == run["sides"]["query"]
    assert st.prompts.get("document", "") == run["sides"]["passage"]


def test_evaluate_of_the_export_gives_the_guard_s_figure_of_the_chosen_candidate(run, tmp_path):
    """What a user keeps, evaluated with `evaluate`'s defaults on the validation set, scores what the guard said."""
    record = json.loads((run["output"] / "guard.json").read_text())
    chosen = next(c for c in record["candidates"] if c["name"] == record["chosen"])
    assert chosen["step"] > 0
    assert main(["evaluate", "--model", str(run["output"] / "encoder"), "--data", str(run["output"] / "validation"),
                 "--output", str(tmp_path / "scores.json")]) == 0
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert scores["ndcg@10"] == pytest.approx(chosen["ndcg@10"], abs=1e-4)


RERANKER_PREFIXES = {"the model's prompts": ([], set(SIDES.values())),
                     "given": (["--query-prefix", "q: ", "--passage-prefix", ""], {"q: ", ""})}


@pytest.mark.parametrize("flags, put", RERANKER_PREFIXES.values(), ids=list(RERANKER_PREFIXES))
def test_train_reranker_mines_with_the_prefixes_given_else_the_model_s_prompts(flags, put, world, tmp_path,
                                                                             monkeypatch, capsys):
    """`train-reranker --negatives model` ranks with `mine`'s prefixes: the options as given, else the prompts."""
    seen = set()
    tokenize = Encoder.tokenize
    monkeypatch.setattr(encoder_module, "_PROMPTS_NOTED", set())
    monkeypatch.setattr(Encoder, "tokenize", lambda self, texts, max_length=None, prefix="": seen.add(prefix) or
                        tokenize(self, texts, max_length, prefix))
    assert main(["train-reranker", "--model", str(world["model"]), "--data", str(world["beir"]), "--output",
                 str(tmp_path / "out"), "--negatives", "model", "--max-steps", "1", "--batch-size", "2",
                 "--group-size", "2", "--rank-end", "4", *flags]) == 0
    assert seen == put
    notes = [line for line in capsys.readouterr().err.splitlines() if "is put before every" in line]
    assert notes == ([] if flags else [
        f"retromae: note: {world['model']}: '{SIDES[side]}' is put before every {side}, the {side} prompt its "
        f"config_sentence_transformers.json names (as sentence-transformers' {method} does); --{side}-prefix '' puts "
        "none" for side, method in (("passage", "encode_document"), ("query", "encode_query"))])


@pytest.mark.parametrize("flag", ["--query-prefix", "--passage-prefix"])
def test_train_reranker_refuses_a_prefix_where_nothing_is_mined_by_the_model(flag, world, tmp_path, capsys):
    """With BM25's negatives, or the training file's, no model encodes: the option is refused, nothing written."""
    assert main(["train-reranker", "--model", str(world["model"]), "--data", str(world["beir"]), "--output",
                 str(tmp_path / "out"), "--negatives", "bm25", flag, ""]) == 2
    assert error_line(capsys) == (f"retromae: error: {flag}: acts only with --negatives model; here it would change "
                                  "nothing: drop it (or give what it needs)")
    assert not (tmp_path / "out").exists()
