"""Values handed to a library are checked first (issue 63, item 3).

faiss aborts or crashes on some factory strings (`HNSW0`: exit 134) and searches silently with a negative
`efSearch`; bm25s raises its own error on a stopword list it lacks; transformers builds whatever a config.json
says. Each is checked before the library sees it, in one line naming the option or the file and field: generated
over faiss's search parameters, the numbers of every factory component, bm25s's stopword lists and the sizes and
rates of a model's config.json, each through the command line, a config file or the Python API where it enters.
"""

import json
import shutil

import numpy as np
import pytest

from retromae.cli import main
from retromae.evaluation.config import EvaluateConfig
from retromae.models.pretrained import CONFIG_NUMBERS, check_folder
from retromae.retrieval.config import STOPWORDS, IndexConfig, SearchConfig
from retromae.retrieval.faiss_options import FACTORY_NUMBERS, SEARCH_PARAMS
from retromae.retrieval.index import build_index, import_faiss, set_search_params
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.options import ConfigError, build_config

faiss_only = pytest.mark.skipif(import_faiss() is None, reason="faiss is not installed")


def bad_params() -> list[str]:
    """For every search parameter: below its minimum, above its maximum, a fraction (whole-number ones), text, NaN."""
    cases = []
    for name, (kind, low, high) in SEARCH_PARAMS.items():
        values = [low - 1, high * 2, "abc", "nan", "inf"] + ([low + 0.5] if kind is int else [])
        cases += [f"{prefix}{name}={value}" for value in values for prefix in ("", "quantizer_")]
    return [*cases, "efSearch", "efsearch=64", "=3"]


def bad_factories() -> list[str]:
    """For every component with bounds: one below its minimum and one above its maximum; then numbers of 0."""
    shapes = {"x": "PQ4x{}", "PQ": "PQ{}", "IVF": "IVF{},Flat", "SQ": "HNSW32_SQ{}"}
    cases = [shapes.get(name, name + "{}" + ("" if name in ("HNSW", "NSG") else ",Flat")).format(number)
             for name, (low, high) in FACTORY_NUMBERS.items() for number in (low - 1, high + 1)]
    return [*cases, "OPQ4_0,PQ4", "RQ2x0", "IVF4_HNSW0,Flat", "", " "]


@pytest.mark.parametrize("params", bad_params())
def test_every_faiss_search_parameter_out_of_range_is_refused_before_faiss(params, tmp_path):
    """`search --params efSearch=-1` exited 0 with one hit per query; `index --params` stored it. Now the command
    line, a config file and the Python API refuse it naming the option, and so does the library's own door."""
    options = {"index": str(tmp_path), "query": ["x"], "params": params}
    for config_cls, values in ((SearchConfig, options), (IndexConfig, {"embeddings": "e", "output": "o"}),
                               (EvaluateConfig, {"model": ["m"], "data": ["d"]})):
        with pytest.raises(ConfigError, match=r"^--params: ") as refused:
            build_config(config_cls, {**values, "params": params})
        assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match=r"^--params: "):
        set_search_params(object(), params)


@pytest.mark.parametrize("factory", bad_factories())
def test_every_factory_number_faiss_cannot_take_is_refused_before_faiss(factory):
    for config_cls, values in ((IndexConfig, {"embeddings": "e", "output": "o"}),
                               (EvaluateConfig, {"model": ["m"], "data": ["d"]})):
        with pytest.raises(ConfigError, match=r"^--factory: "):
            build_config(config_cls, {**values, "factory": factory})
    with pytest.raises(ConfigError, match=r"^--factory: "):
        build_index(np.ones((8, 4), dtype=np.float32), factory)


@faiss_only
@pytest.mark.parametrize("factory", ["Flat", "HNSW2", "HNSW32", "IVF2,Flat", "IVF2,PQ2x4", "PQ2x8", "OPQ2_4,PQ2",
                                     "HNSW4_SQ8", "IVF2,SQfp16", "L2norm,Flat", "PCA2,Flat", "NSG4,Flat"])
def test_factories_within_the_bounds_are_built(factory):
    vectors = np.random.default_rng(0).random((300, 4), dtype=np.float32)
    build_config(IndexConfig, {"embeddings": "e", "output": "o", "factory": factory})
    assert build_index(vectors, factory, params="efSearch=16" if "HNSW" in factory else "").ntotal == 300


@pytest.mark.parametrize("stopwords", STOPWORDS)
def test_every_stopword_list_offered_is_one_bm25s_has(stopwords):
    from retromae.retrieval.bm25 import BM25, BM25Params

    BM25(BM25Params(stopwords=stopwords)).index(["a", "b"], ["the cat sat", "le chat"])


def test_a_stopword_list_bm25s_lacks_is_refused_the_three_ways(tmp_path, capsys):
    from retromae.retrieval.bm25 import BM25Params

    with pytest.raises(ConfigError, match="^--stopwords: must be one of"):
        BM25Params(stopwords="klingon")
    config = tmp_path / "c.yaml"
    config.write_text("stopwords: klingon\n")
    with pytest.raises(ConfigError, match="^--stopwords: "):
        build_config(IndexConfig, {"embeddings": "e", "output": "o", "hybrid": True, "config": config})
    with pytest.raises(SystemExit):
        main(["bm25", "--corpus", "c", "--queries", "q", "--output", "o", "--stopwords", "klingon"])
    assert "invalid choice: 'klingon'" in capsys.readouterr().err


def bad_config_values() -> list[tuple[str, object]]:
    cases = []
    for name, (kind, domain) in CONFIG_NUMBERS.items():
        below = (domain.low - 1) if kind is int else -0.5
        cases += [(name, below), (name, "64"), (name, True), (name, [1]), (name, 10**13 if kind is int else 2.0)]
        if kind is int:
            cases.append((name, 2.5))
    return cases


@pytest.mark.parametrize(("field", "value"), bad_config_values())
def test_every_size_and_rate_of_a_config_json_is_checked_before_transformers(field, value, tiny_model_dir,
                                                                             tmp_path):
    folder = tmp_path / "model"  # the config alone: it is checked before anything else of the folder is read
    folder.mkdir()
    config = json.loads((tiny_model_dir / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, field: value}))
    with pytest.raises(ModelLoadError, match=rf"config.json: {field} is ") as refused:
        check_folder(str(folder))
    assert "\n" not in str(refused.value)


def test_the_audit_s_cases_through_the_command_line(tiny_model_dir, tmp_path, capsys):
    """`index --factory HNSW0` aborted inside faiss (exit 134); `search --params efSearch=-1` exited 0; an index.json
    storing such a value; `encode --model` of a folder whose config.json says hidden_size 0."""
    emb, idx = tmp_path / "emb", tmp_path / "idx"
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(n), "text": f"document {n} about cats"}) + "\n"
                              for n in range(40)))
    assert main(["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--output", str(emb),
                 "--no-progress"]) == 0
    capsys.readouterr()
    refusals = [["index", "--embeddings", str(emb), "--output", str(idx), "--factory", "HNSW0"],
                ["index", "--embeddings", str(emb), "--output", str(idx), "--params", "efSearch=-1"]]
    for args in refusals:
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("retromae: error: --"), err
    if import_faiss() is not None:
        assert main(["index", "--embeddings", str(emb), "--output", str(idx), "--factory", "HNSW8"]) == 0
        assert main(["search", "--index", str(idx), "--query", "cats", "--params", "efSearch=-1"]) == 2
        assert "--params: efSearch=-1: must be a whole number" in capsys.readouterr().err
        info = json.loads((idx / "index.json").read_text())
        (idx / "index.json").write_text(json.dumps({**info, "params": "efSearch=-1"}))
        assert main(["search", "--index", str(idx), "--query", "cats"]) == 2
        assert "index.json: params: efSearch=-1" in capsys.readouterr().err
    bad = tmp_path / "bad-model"
    shutil.copytree(tiny_model_dir, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "hidden_size": 0}))
    assert main(["encode", "--model", str(bad), "--corpus", str(corpus), "--output", str(tmp_path / "e2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config.json: hidden_size is 0" in err[0], err


def test_a_k1_that_would_shrink_every_bm25_score_to_nothing_is_refused():
    """bm25s scores in float32: `k1 1e38` gave every query no result, exit 0."""
    from retromae.retrieval.bm25 import BM25Params

    BM25Params(k1=1000)
    for k1 in (1000.5, 1e38, 1e300):
        with pytest.raises(ConfigError, match=r"^--k1: must lie in \[0, 1000\]"):
            BM25Params(k1=k1)
