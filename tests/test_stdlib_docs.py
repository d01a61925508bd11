"""The standard-library docstring retrieval set, built from a tiny fake library folder."""

from __future__ import annotations

import json

from retromae.data.retrieval_sets import load_retrieval_set
from retromae.data.stdlib_docs import build_stdlib_retrieval_set, is_test_module, iter_doc_pairs

LONG = " ".join(["word"] * 20)


def write_module(root, relative: str, body: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")


def fake_stdlib(root) -> None:
    write_module(root, "alpha.py", f'"""Alpha module does useful things.\n\n{LONG}\n"""\n'
                 f'def f():\n    """Return the thing you asked for.\n\n    {LONG}\n    """\n'
                 'def g():\n    """Too short."""\n')
    write_module(root, "pkg/__init__.py", f'class C:\n    """A class holding some state.\n\n    {LONG}\n    """\n')
    write_module(root, "test/test_alpha.py", f'"""Tests are never part of the set.\n\n{LONG}\n"""\n')
    write_module(root, "broken.py", "def (:\n")


def test_pairs_take_first_line_as_query_and_skip_tests_and_short_docstrings(tmp_path):
    fake_stdlib(tmp_path)
    pairs = {p.doc_id: p for p in iter_doc_pairs(tmp_path)}
    assert set(pairs) == {"alpha", "alpha:f", "pkg:C"}
    assert pairs["alpha:f"].query == "Return the thing you asked for."
    assert pairs["alpha:f"].text == LONG and pairs["pkg:C"].module == "pkg"


def test_beir_folder_loads_and_splits_by_module(tmp_path):
    fake_stdlib(tmp_path / "lib")
    counts = build_stdlib_retrieval_set(tmp_path / "set", root=tmp_path / "lib", test_share=0.5)
    assert counts["documents"] == 3 and counts["train"] + counts["test"] == 3
    queries = [json.loads(line) for line in (tmp_path / "set" / "queries.jsonl").read_text().splitlines()]
    assert len(queries) == 3
    for split in ("train", "test"):
        if counts[split]:
            loaded = load_retrieval_set(tmp_path / "set", split)
            modules = {doc.split(":")[0] for rel in loaded.qrels.values() for doc in rel}
            assert all(is_test_module(m, 0.5) == (split == "test") for m in modules)


def test_split_is_stable_and_by_top_level_package():
    assert is_test_module("email.mime.text") == is_test_module("email.parser")
    assert [is_test_module(m) for m in ("json", "os", "email")] == [is_test_module(m) for m in ("json", "os", "email")]
