"""Round ten: an untied fine-tune (`finetune --untie`) is its two towers, each encoding its own side.

Its run folder stands for the query tower where queries are encoded and for the passage tower where passages are
(`evaluate`, `mine`, `encode`, `search`, `Searcher`, `Encoder.load(..., side=)`); where one model would encode both
sides it is refused, and a tower's folder is refused for the other side (`model_source.resolve_model`, reading the
`tower` each tower's retromae_encoder.json records: `model_source.tower_side`). The query tower searches an index of
its passage tower, by --model and by pre-encoded vectors (`lineage.same_model`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import bare_config, error_line, tiny_beir, tiny_bert_config
from transformers import BertModel

from retromae import Searcher
from retromae.cli import main
from retromae.finetuning.config import FinetuneConfig
from retromae.finetuning.model import DualEncoder, LossOptions
from retromae.finetuning.run import _load_encoders, export_towers
from retromae.models.encoder import Encoder, PoolingConfig
from retromae.models.model_source import tower_side
from retromae.runtime.errors import ModelLoadError

QUERY = "query-encoder"


@pytest.fixture(scope="module")
def world(tiny_model_dir, tiny_tokenizer, tmp_path_factory) -> dict:
    """An untied fine-tune's run folder (written by the fine-tune's export, its query tower of other weights than
    its passage tower), a BEIR folder, and an index of the corpus encoded with the run folder."""
    root = tmp_path_factory.mktemp("untied")
    towers = []
    for seed in (1, 0):
        torch.manual_seed(seed)
        towers.append(BertModel(tiny_bert_config(len(tiny_tokenizer))))
    model = DualEncoder(*towers, PoolingConfig("cls"), LossOptions())
    export_towers(model, Encoder.load(tiny_model_dir), root / "run")
    (root / "run" / "retromae-run.json").write_text("{}")
    tiny_beir(root / "beir")
    assert main(["encode", "--model", str(root / "run"), "--corpus", str(root / "beir"), "--output",
                 str(root / "emb"), "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(root / "emb"), "--output", str(root / "idx")]) == 0
    corpus = [json.loads(line)["text"] for line in (root / "beir" / "corpus.jsonl").open()]
    query = json.loads(next(iter((root / "beir" / "queries.jsonl").open())))["text"]
    return {"root": root, "run": root / "run", "beir": root / "beir", "idx": root / "idx", "corpus": set(corpus),
            "query": query}


@pytest.fixture()
def encoded_by(monkeypatch) -> dict[str, set[str]]:
    """The towers (their folder names) that encoded texts, by the first text of each call."""
    found: dict[str, set[str]] = {}
    encode = Encoder.encode

    def spy(self, texts, *args, **kwargs):
        found.setdefault(texts[0], set()).add(Path(self.source).name)
        return encode(self, texts, *args, **kwargs)

    monkeypatch.setattr(Encoder, "encode", spy)
    return found


def test_the_export_records_each_tower_s_side(world, tmp_path, capsys):
    run = world["run"]
    assert {json.loads((run / name / "retromae_encoder.json").read_text())["tower"]
            for name in ("encoder", QUERY)} == {"passage", "query"}
    assert (tower_side(run / "encoder"), tower_side(run / QUERY), tower_side(run)) == ("passage", "query", "")
    older = tmp_path / "older"  # a run from before the record: the side its name has beside its twin
    shutil.copytree(run, older)
    for name in ("encoder", QUERY):
        record = json.loads((older / name / "retromae_encoder.json").read_text())
        del record["tower"]
        (older / name / "retromae_encoder.json").write_text(json.dumps(record))
    assert (tower_side(older / "encoder"), tower_side(older / QUERY)) == ("passage", "query")
    shutil.copytree(older / QUERY, tmp_path / "alone")
    assert tower_side(tmp_path / "alone") == ""
    record = older / QUERY / "retromae_encoder.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "tower": "both"}))
    assert main(["encode", "--model", str(older / QUERY), "--queries", str(world["beir"]), "--output",
                 str(tmp_path / "q"), "--no-progress"]) == 2
    assert error_line(capsys) == f"retromae: error: {record}: tower is 'both'; it must be query or passage"
    assert not (tmp_path / "q").exists()


def paths(world: dict, out: Path) -> dict[str, object]:
    """Every path that encodes queries (and passages) with an untied fine-tune, as a call."""
    run, beir, idx, query = str(world["run"]), str(world["beir"]), str(world["idx"]), world["query"]
    return {
        "encode --queries": lambda: main(["encode", "--model", run, "--queries", beir, "--output", str(out / "q"),
                                          "--no-progress"]),
        "encode --corpus": lambda: main(["encode", "--model", run, "--corpus", beir, "--output", str(out / "c"),
                                         "--no-progress"]),
        "evaluate": lambda: main(["evaluate", "--model", run, "--data", beir]),
        "evaluate table": lambda: main(["evaluate", "--model", run, "--data", beir, "--bm25"]),
        "mine": lambda: main(["mine", "--model", run, "--data", beir, "--output", str(out / "m.jsonl")]),
        "search --model RUN": lambda: main(["search", "--index", idx, "--model", run, "--query", query]),
        "search --model RUN/query-encoder": lambda: main(["search", "--index", idx, "--model", f"{run}/{QUERY}",
                                                          "--query", query]),
        "search, the index's model": lambda: main(["search", "--index", idx, "--query", query]),
        "Searcher.load": lambda: Searcher.load(idx).search(query),
        "Searcher.load(model=RUN)": lambda: Searcher.load(idx, model=run).search(query),
        "Encoder.load(side=query)": lambda: Encoder.load(run, side="query").encode([query]),
    }


PATHS = list(paths({"run": "", "beir": "", "idx": "", "query": ""}, Path()))


@pytest.mark.parametrize("path", PATHS)
def test_each_side_is_encoded_by_its_tower(path, world, encoded_by, tmp_path):
    returned = paths(world, tmp_path)[path]()
    assert path.startswith(("Searcher", "Encoder")) or returned == 0
    assert encoded_by, path
    for first, towers in encoded_by.items():
        assert towers == {"encoder" if first in world["corpus"] else QUERY}, (first, towers)


def test_pre_encoded_query_vectors_of_the_query_tower_search_its_twin_s_index(world, tiny_model_dir, tmp_path,
                                                                              capsys):
    run, beir = world["run"], world["beir"]
    assert main(["encode", "--model", str(run / QUERY), "--queries", str(beir), "--output", str(tmp_path / "q"),
                 "--no-progress"]) == 0
    assert main(["search", "--index", str(world["idx"]), "--queries", str(tmp_path / "q"), "--output",
                 str(tmp_path / "run.trec")]) == 0
    assert main(["index", "--embeddings", str(world["root"] / "emb"), "--output", str(tmp_path / "hnsw"),
                 "--factory", "HNSW8", "--recall-queries", str(tmp_path / "q")]) == 0
    capsys.readouterr()
    assert main(["encode", "--model", str(tiny_model_dir), "--corpus", str(beir), "--output", str(tmp_path / "e"),
                 "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(tmp_path / "e"), "--output", str(tmp_path / "i")]) == 0
    capsys.readouterr()
    assert main(["search", "--index", str(tmp_path / "i"), "--queries", str(tmp_path / "q"), "--output",
                 str(tmp_path / "other.trec")]) == 2
    assert f"--queries: {tmp_path / 'q'} was encoded otherwise than the documents of" in error_line(capsys)
    assert main(["search", "--index", str(tmp_path / "i"), "--model", str(run / QUERY), "--query", "x"]) == 2
    assert "is not the model the index was encoded with" in error_line(capsys)
    assert not (tmp_path / "other.trec").exists()


BOTH = {  # a command reading one model for both sides
    "adapt": ["adapt", "--corpus", "{beir}", "--output", "{out}"],
    "pretrain": ["pretrain", "--corpus", "{beir}/corpus.jsonl", "--output", "{out}", "--max-steps", "1"],
    "finetune": ["finetune", "--data", "{beir}", "--output", "{out}"],
    "train-reranker": ["train-reranker", "--data", "{beir}", "--output", "{out}"],
}


@pytest.mark.parametrize("command", BOTH)
def test_a_command_reading_one_model_for_both_sides_refuses_the_run_folder(command, world, tmp_path, capsys):
    argv = [part.format(beir=world["beir"], out=tmp_path / "out") for part in BOTH[command]]
    assert main([*argv, "--model", str(world["run"])]) == 2
    assert error_line(capsys).startswith(f"retromae: error: --model {world['run']}: holds the two towers of an "
                                         "untied fine-tune (query-encoder/ encodes queries, encoder/ passages)")
    assert not (tmp_path / "out").exists()


def test_the_api_refuses_the_run_folder_without_a_side(world):
    with pytest.raises(ModelLoadError, match="holds the two towers of an untied fine-tune"):
        Encoder.load(world["run"])


OTHER_SIDE = {  # (the tower named, the command), each encoding the other side with it
    "encode --queries": ("encoder", ["encode", "--queries", "{beir}", "--output", "{out}", "--no-progress"]),
    "encode --corpus": (QUERY, ["encode", "--corpus", "{beir}", "--output", "{out}", "--no-progress"]),
    "search": ("encoder", ["search", "--index", "{idx}", "--query", "x"]),
    "evaluate": ("encoder", ["evaluate", "--data", "{beir}", "--output", "{out}"]),
    "mine": ("encoder", ["mine", "--data", "{beir}", "--output", "{out}"]),
    "finetune --untie": ("encoder", ["finetune", "--untie", "--data", "{beir}", "--output", "{out}"]),
}


@pytest.mark.parametrize("command", OTHER_SIDE)
def test_a_tower_is_refused_for_the_other_side(command, world, tmp_path, capsys):
    name, argv = OTHER_SIDE[command]
    argv = [part.format(beir=world["beir"], idx=world["idx"], out=tmp_path / "out") for part in argv]
    tower = world["run"] / name
    assert main([*argv, "--model", str(tower)]) == 2
    own, other = ("query", "passage") if name == QUERY else ("passage", "query")
    twin = world["run"] / ("encoder" if name == QUERY else QUERY)
    texts = {"query": "queries", "passage": "passages"}
    assert error_line(capsys).startswith(f"retromae: error: --model {tower}: is the {own} tower of an untied "
                                         f"fine-tune, which encodes {texts[own]}; its {texts[other]} are "
                                         f"encoded by its {other} tower {twin}: name that, or the run folder "
                                         f"{world['run']}")
    assert not (tmp_path / "out").exists()


def test_the_searcher_refuses_the_passage_tower_for_its_queries(world):
    with pytest.raises(ModelLoadError, match="is the passage tower of an untied fine-tune"):
        Searcher.load(world["idx"], model=world["run"] / "encoder").search("x")


def test_an_untied_fine_tune_continues_each_tower_from_its_own(world):
    config = bare_config(FinetuneConfig, model=str(world["run"]), untie=True)
    passage, query = _load_encoders(config, torch.device("cpu"))
    assert (Path(passage.source).name, Path(query.source).name) == ("encoder", QUERY)
