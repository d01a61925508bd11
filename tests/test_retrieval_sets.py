"""Readers and writers of retrieval sets, TREC runs and STS pairs, on tiny files and on the real SciFact/STS-B."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_data

from retromae.data.retrieval_sets import (
    Passage,
    load_corpus,
    load_qrels,
    load_queries,
    load_retrieval_set,
    load_sts_pairs,
    read_trec_run,
    write_trec_run,
)
from retromae.runtime.errors import DataError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.fixture()
def beir_folder(tmp_path) -> Path:
    folder = tmp_path / "beir"
    write(folder / "corpus.jsonl", jsonl([
        {"_id": "d1", "title": "Dense retrieval", "text": "encoders map text to vectors"},
        {"_id": "d2", "title": "", "text": "masked auto-encoders"},
        {"_id": "d3", "text": "no title field"},
    ]))
    write(folder / "queries.jsonl", jsonl([
        {"_id": "q1", "text": "what is dense retrieval", "metadata": {}},
        {"_id": "q2", "text": "masking"},
        {"_id": "q3", "text": "only in train"},
    ]))
    write(folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td3\t0\nq2\td2\t1\n")
    write(folder / "qrels" / "train.tsv", "query-id\tcorpus-id\tscore\nq3\td1\t1\n")
    return folder


@pytest.fixture()
def msmarco_folder(tmp_path) -> Path:
    folder = tmp_path / "msmarco"
    write(folder / "collection.tsv", "0\tthe first passage\n1\tthe second passage\n2\tthe third passage\n")
    write(folder / "queries.dev.tsv", "100\tfirst question\n200\tsecond question\n300\tunjudged question\n")
    write(folder / "qrels.dev.tsv", "100\t0\t0\t1\n200 0 2 1\n")
    return folder


def test_beir_folder_keeps_the_queries_judged_in_the_split(beir_folder):
    data = load_retrieval_set(beir_folder, split="test")
    assert list(data.corpus) == ["d1", "d2", "d3"]
    assert data.corpus["d1"] == Passage("Dense retrieval", "encoders map text to vectors")
    assert data.corpus["d1"].joined() == "Dense retrieval encoders map text to vectors"
    assert data.corpus["d3"].joined() == "no title field"
    assert data.corpus_texts()["d1"] == data.corpus["d1"].joined() and len(data.corpus_texts()) == len(data.corpus)
    assert data.queries == {"q1": "what is dense retrieval", "q2": "masking"}
    assert data.qrels == {"q1": {"d1": 2, "d3": 0}, "q2": {"d2": 1}}
    assert list(load_retrieval_set(beir_folder, split="train").queries) == ["q3"]


def test_msmarco_folder_with_tab_or_space_trec_qrels(msmarco_folder):
    data = load_retrieval_set(msmarco_folder, split="dev")
    assert data.corpus["2"] == Passage("", "the third passage")
    assert data.queries == {"100": "first question", "200": "second question"}
    assert data.qrels == {"100": {"0": 1}, "200": {"2": 1}}


def test_msmarco_generic_names_and_gzip(tmp_path):
    folder = tmp_path / "marco"
    folder.mkdir()
    with gzip.open(folder / "collection.tsv.gz", "wt", encoding="utf-8") as handle:
        handle.write("7\tTitle seven\tpassage seven\n")
    write(folder / "queries.tsv", "1\tquestion\n")
    write(folder / "qrels.tsv", "1 0 7 1\n")
    data = load_retrieval_set(folder, split="dev")
    assert data.corpus == {"7": Passage("Title seven", "passage seven")}
    assert data.qrels == {"1": {"7": 1}}


def test_missing_split_lists_the_files_looked_for(beir_folder, msmarco_folder):
    with pytest.raises(DataError, match=r"qrels \(split 'dev'\) file; looked for qrels/dev.tsv, qrels.dev.tsv"):
        load_retrieval_set(beir_folder, split="dev")
    with pytest.raises(DataError, match="no corpus file; looked for corpus.jsonl, collection.tsv"):
        load_retrieval_set(beir_folder / "qrels")
    with pytest.raises(DataError, match="not a folder"):
        load_retrieval_set(beir_folder / "absent")


def test_qrels_naming_unknown_documents_or_queries_warn_once_with_counts(beir_folder, caplog):
    write(beir_folder / "qrels" / "test.tsv",
          "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tghost\t1\nq2\tghost\t1\nq2\tspook\t1\nq9\td1\t1\nq9\td2\t1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a note in our words (a log record), not a raw UserWarning
        data = load_retrieval_set(beir_folder)
    notes = [record for record in caplog.records if record.name.startswith("retromae")]
    assert len(notes) == 1 and notes[0].levelname == "WARNING"
    message = notes[0].getMessage()
    assert "test.tsv" in message
    assert "2 judgments name 1 queries missing from queries.jsonl (e.g. 'q9')" in message
    assert "3 judgments name 2 documents missing from corpus.jsonl (e.g. 'ghost', 'spook')" in message
    assert data.qrels == {"q1": {"d1": 1}}  # q2 had only unknown documents: nothing left to evaluate
    assert list(data.queries) == ["q1"]


@pytest.mark.parametrize(("corpus_id", "judged_id", "how"), [
    ("caf\u00e91", "cafe\u03011", "NFC normalisation"),  # NFC in the corpus, NFD in the qrels (audit 7, section 8)
    ("cafe\u03011", "caf\u00e91", "NFC normalisation"),
    ("D3", "d3", "case folding"), ("Doc\u00c91", "doce\u03011", "NFC normalisation and case folding")])
def test_a_dropped_id_that_looks_like_a_corpus_id_is_shown_in_code_points(beir_folder, caplog, corpus_id, judged_id,
                                                                         how):
    """The id is still dropped (ids are compared character for character), but the warning says which corpus id it
    equals once normalised, in code points, and how many queries left the evaluation with it."""
    write(beir_folder / "corpus.jsonl", jsonl([{"_id": "d1", "text": "a"}, {"_id": corpus_id, "text": "b"}]))
    write(beir_folder / "qrels" / "test.tsv", f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\t{judged_id}\t1\n")
    data = load_retrieval_set(beir_folder)
    assert list(data.queries) == ["q1"]
    [message] = [record.getMessage() for record in caplog.records if "dropped them" in record.getMessage()]
    assert (f"1 of them equal a corpus id once Unicode-normalised (NFC) or case-folded, while ids are compared "
            f"character for character: e.g. {ascii(judged_id)} of the qrels is {ascii(corpus_id)} of the corpus "
            f"after {how}") in message
    assert "1 queries lost all their relevant judgments and leave the evaluation" in message


def test_a_dropped_id_like_no_corpus_id_says_nothing_of_normalisation(beir_folder, caplog):
    write(beir_folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tghost\t1\n")
    load_retrieval_set(beir_folder)
    [message] = [record.getMessage() for record in caplog.records if "dropped them" in record.getMessage()]
    assert "normalised" not in message and "lost all" not in message  # q1 keeps d1


def test_no_query_left_is_an_error(beir_folder):
    write(beir_folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\tghost\t1\n")
    with pytest.raises(DataError, match="test.tsv: no judged query left"):
        load_retrieval_set(beir_folder)


def test_duplicate_ids_name_the_file_and_both_lines(tmp_path):
    corpus = write(tmp_path / "corpus.jsonl", jsonl([{"_id": i, "text": "t"} for i in ["a", "b", "a", "c", "b"]]))
    with pytest.raises(DataError, match=r"corpus.jsonl:3: id 'a' was given before, at .*corpus.jsonl:1;"):
        load_corpus(corpus)
    queries = write(tmp_path / "queries.tsv", "1\tx\n2\ty\n1\tz\n")
    with pytest.raises(DataError, match=r"queries.tsv:3: id '1' was given before, at .*queries.tsv:1;"):
        load_queries(queries)


def test_empty_files_are_errors(tmp_path):
    with pytest.raises(DataError, match="corpus.jsonl: empty corpus"):
        load_corpus(write(tmp_path / "corpus.jsonl", "\n\n"))
    with pytest.raises(DataError, match="collection.tsv: empty corpus"):
        load_corpus(write(tmp_path / "collection.tsv", ""))
    with pytest.raises(DataError, match="queries.jsonl: no queries"):
        load_queries(write(tmp_path / "queries.jsonl", ""))
    with pytest.raises(DataError, match="qrels.tsv: no relevance judgments"):
        load_qrels(write(tmp_path / "qrels.tsv", "query-id\tcorpus-id\tscore\n"))
    with pytest.raises(DataError, match="run.trec: the run is empty"):
        read_trec_run(write(tmp_path / "run.trec", ""))
    with pytest.raises(DataError, match="sts.csv: no sentence pairs"):
        load_sts_pairs(write(tmp_path / "sts.csv", ""))


@pytest.mark.parametrize(("name", "text", "reader", "message"), [
    ("corpus.jsonl", '{"_id": "1", "text": "a"}\n{"_id": "2", "text": \n', load_corpus, r":2: malformed JSON"),
    ("corpus.jsonl", '{"_id": "1", "text": "a"}\n\n{"_id": "2"}\n', load_corpus, r":3: missing field 'text'"),
    ("corpus.jsonl", '{"title": "t", "text": "a"}\n', load_corpus, r":1: missing field '_id' or 'id'"),
    ("corpus.jsonl", '["a", "b"]\n', load_corpus, r":1: expected a JSON object"),
    ("collection.tsv", "1\ta\n2\ta\tb\tc\n", load_corpus, r":2: expected 'id<TAB>text' or 'id<TAB>title<TAB>text'"),
    ("collection.tsv", "1\ta\n\tb\n", load_corpus, r":2: empty id"),
    ("queries.tsv", "1\ta\n2 b\n", load_queries, r":2: expected 'id<TAB>text', found 1"),
    ("queries.jsonl", '{"_id": "1"}\n', load_queries, r":1: missing field 'text'"),
    ("qrels.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\thigh\n", load_qrels, r":3: relevance grade 'high'"),
    ("qrels.tsv", "q1 0 d1 1\nq1 d1\n", load_qrels, r":2: 2 fields where the file's first line has 4"),
    ("qrels.tsv", "q1 0 d1 1\nq1 0 d1 2\n", load_qrels, r":2: query 'q1' judges document 'd1' twice \(1, 2\)"),
    ("run.trec", "q1 Q0 d1 1 0.5 x\nq1 Q0 d2 2 0.4\n", read_trec_run, r":2: expected 'qid Q0 docid rank score tag'"),
    ("run.trec", "q1 Q0 d1 1 high x\n", read_trec_run, r":1: score 'high' is not a number"),
    ("run.trec", "q1 Q0 d1 1 0.5 x\nq1 Q0 d1 2 0.4 x\n", read_trec_run, r":2: document 'd1' appears twice"),
    ("sts.csv", "g\tf\t2012\t1\t2.5\tA\tB\ng\tf\t2012\t2\t2.5\tA\n", load_sts_pairs, r":2: expected at least 7"),
    ("sts.csv", "g\tf\t2012\t1\tfive\tA\tB\n", load_sts_pairs, r":1: score 'five' is not a number"),
])
def test_malformed_lines_name_file_and_line(tmp_path, name, text, reader, message):
    path = write(tmp_path / name, text)
    with pytest.raises(DataError, match=f"{name}{message}"):
        reader(path)


@pytest.mark.parametrize("grade", [2**31, -2**31, 10**300])
@pytest.mark.parametrize(("layout", "line"), [("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t{}\n", 3),
                                              ("q1 0 d1 1\nq1 0 d2 {}\n", 2)])
def test_a_relevance_grade_beyond_a_c_int_is_refused_naming_file_and_line(tmp_path, grade, layout, line):
    """Round six: two grades of 1.7e308 made NDCG inf/inf = NaN; a grade is what trec_eval reads, a C int."""
    path = write(tmp_path / "qrels.tsv", layout.format(grade))
    with pytest.raises(DataError, match=rf"qrels.tsv:{line}: relevance grade '{str(grade)[:12]}.* is beyond what "
                                        r"trec_eval reads \(a C int\): give a whole number from -2147483647 to "):
        load_qrels(path)
    assert load_qrels(write(tmp_path / "edge.tsv", layout.format(2**31 - 1)))["q1"]["d2"] == 2**31 - 1


def test_invalid_utf8_names_the_line_and_unknown_formats_are_rejected(tmp_path):
    path = tmp_path / "queries.tsv"
    path.write_bytes(b"1\tfine\n2\tbad \xff byte\n")
    with pytest.raises(DataError, match="queries.tsv:2: invalid UTF-8"):
        load_queries(path)
    with pytest.raises(DataError, match="corpus.parquet: a .parquet corpus is read by pre-training only"):
        load_corpus(write(tmp_path / "corpus.parquet", "x"))
    with pytest.raises(DataError, match="absent.tsv: no such file"):
        load_qrels(tmp_path / "absent.tsv")


def test_trec_run_round_trip_sorted_by_score_then_doc_id_descending(tmp_path):
    run = {"q2": {"a": 0.5, "b": 0.5, "c": 1 / 3}, "q1": {"x": np.float32(0.25), "y": 2.0}}
    path = tmp_path / "out" / "run.trec"
    write_trec_run(run, path, tag="bm25")
    lines = path.read_text().splitlines()
    assert lines[:3] == ["q2 Q0 b 1 0.5 bm25", "q2 Q0 a 2 0.5 bm25", f"q2 Q0 c 3 {1 / 3!r} bm25"]
    assert lines[3:] == ["q1 Q0 y 1 2.0 bm25", "q1 Q0 x 2 0.25 bm25"]
    assert read_trec_run(path) == {"q2": {"a": 0.5, "b": 0.5, "c": 1 / 3}, "q1": {"x": 0.25, "y": 2.0}}
    assert [p.name for p in path.parent.iterdir()] == ["run.trec"]  # no temporary file left behind
    with pytest.raises(ValueError, match="tag 'my run'"):
        write_trec_run(run, path, tag="my run")
    with pytest.raises(ValueError, match="document id 'd 1'"):
        write_trec_run({"q": {"d 1": 1.0}}, path)


def test_sts_pairs_ignore_extra_columns_and_quotes(tmp_path):
    path = write(tmp_path / "sts.csv",
                 'main-news\tfile\t2012\t0001\t4.200\tA "quoted" man.\tA man.\n'
                 "main-news\tfile\t2012\t0002\t0.5\tOne.\tTwo.\tsource-a\tsource-b\n")
    first, second, gold = load_sts_pairs(path)
    assert first == ['A "quoted" man.', "One."]
    assert second == ["A man.", "Two."]
    assert gold.dtype == np.float64 and gold.tolist() == [4.2, 0.5]


def test_real_stsbenchmark_test_split():
    first, second, gold = load_sts_pairs(shared_data("sts/stsbenchmark/sts-test.csv"))
    assert len(first) == len(second) == len(gold) == 1379
    assert 0.0 <= gold.min() and gold.max() <= 5.0


def test_real_scifact_test_split():
    data = load_retrieval_set(shared_data("beir/scifact"), split="test")
    assert len(data.corpus) == 5183
    assert len(data.queries) == 300
    assert sum(len(docs) for docs in data.qrels.values()) == 339
    assert set(data.qrels) == set(data.queries)


@pytest.mark.parametrize("text", [
    "query-id\tcorpus-id\tscore\n3\t14717500\t1\t0\n",  # a 4-field line under a 3-column header
    "3\t14717500\t1\t0\n",  # 4 fields, no header, and not TREC's 'qid 0 docid rel'
])
def test_four_column_beir_lines_are_never_read_as_trec(tmp_path, text):
    with pytest.raises(DataError, match=r"qrels.tsv:(1: cannot tell the qrels format|2: 4 fields)"):
        load_qrels(write(tmp_path / "qrels.tsv", text))


def test_qrels_format_comes_from_the_header_or_the_declaration(tmp_path):
    header = write(tmp_path / "named.tsv", "query-id\tcorpus-id\tscore\titeration\n3\t14717500\t1\t0\n")
    assert load_qrels(header) == {"3": {"14717500": 1}}  # columns by their names, not by their count
    reordered = write(tmp_path / "reordered.tsv", "corpus-id\tquery-id\tscore\nd7\tq1\t2\n")
    assert load_qrels(reordered) == {"q1": {"d7": 2}}
    trec = write(tmp_path / "trec.tsv", "q1 0 d1 1\nq1 Q0 d2 0\n")
    assert load_qrels(trec) == {"q1": {"d1": 1, "d2": 0}}
    covid = write(tmp_path / "covid.tsv", "1 0.5 doc-a 2\n1 1 doc-b 1\n")  # TREC-COVID's rounds as iterations
    with pytest.raises(DataError, match="cannot tell the qrels format"):
        load_qrels(covid)
    assert load_qrels(covid, qrels_format="trec") == {"1": {"doc-a": 2, "doc-b": 1}}
    assert load_qrels(write(tmp_path / "plain.tsv", "q1\td1\t1\n"), qrels_format="beir") == {"q1": {"d1": 1}}
