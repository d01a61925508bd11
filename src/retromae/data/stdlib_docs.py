"""A real retrieval set present wherever Python is: the docstrings of the standard library.

Owns: turning the standard library's source files into a BEIR folder without importing any module (the
files are parsed with `ast`). Each docstring of a module, class or function becomes one query-document pair:
its first line is the query, the rest is the document. Modules are split into train and test by a stable
hash of their name, so no module contributes to both splits. Does not own training or evaluation.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from retromae.runtime.io import atomic_directory

SKIPPED_PARTS = {"site-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo"}


@dataclass(frozen=True)
class DocPair:
    """One docstring: `query` is its first line, `text` the rest, `module` the dotted module it lives in."""

    doc_id: str
    module: str
    query: str
    text: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _docstring_nodes(tree: ast.Module) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) of the module and every class and function in it."""
    stack: list[tuple[str, ast.AST]] = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        docstring = ast.get_docstring(node, clean=True)
        if docstring:
            yield prefix, docstring
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stack.append((f"{prefix}.{child.name}" if prefix else child.name, child))


def _split_docstring(docstring: str) -> tuple[str, str]:
    lines = docstring.strip().splitlines()
    return lines[0].strip(), " ".join(line.strip() for line in lines[1:] if line.strip())


def iter_doc_pairs(root: Path | None = None, min_query_words: int = 4, min_text_words: int = 15) -> Iterator[DocPair]:
    """Every usable docstring of the standard library under `root`, in a stable order."""
    root = root or stdlib_root()
    for path in sorted(root.rglob("*.py")):
        if SKIPPED_PARTS & set(path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a few stdlib files are deliberately invalid (test data, templates)
        module = _module_name(path, root)
        for name, docstring in _docstring_nodes(tree):
            query, text = _split_docstring(docstring)
            if len(query.split()) >= min_query_words and len(text.split()) >= min_text_words:
                yield DocPair(f"{module}:{name}" if name else module, module, query, text)


def is_test_module(module: str, test_share: float = 0.2) -> bool:
    """Stable module-level split: the module's top-level package decides, hashed."""
    digest = hashlib.sha256(module.split(".")[0].encode()).digest()
    return digest[0] / 256 < test_share


def write_beir_folder(output: Path, pairs: list[DocPair], test_share: float = 0.2) -> dict[str, int]:
    """Write corpus.jsonl, queries.jsonl and qrels/{train,test}.tsv; returns the counts."""
    counts = {"documents": len(pairs), "train": 0, "test": 0}
    with atomic_directory(Path(output)) as staging:
        (staging / "qrels").mkdir()
        with (staging / "corpus.jsonl").open("w", encoding="utf-8") as corpus, \
                (staging / "queries.jsonl").open("w", encoding="utf-8") as queries:
            qrels = {split: [["query-id", "corpus-id", "score"]] for split in ("train", "test")}
            for index, pair in enumerate(pairs):
                corpus.write(json.dumps({"_id": pair.doc_id, "title": "", "text": pair.text}) + "\n")
                query_id = f"q{index}"
                queries.write(json.dumps({"_id": query_id, "text": pair.query}) + "\n")
                split = "test" if is_test_module(pair.module, test_share) else "train"
                qrels[split].append([query_id, pair.doc_id, "1"])
                counts[split] += 1
        for split, rows in qrels.items():
            (staging / "qrels" / f"{split}.tsv").write_text("".join("\t".join(r) + "\n" for r in rows), "utf-8")
    return counts


def build_stdlib_retrieval_set(output: Path, root: Path | None = None, test_share: float = 0.2) -> dict[str, int]:
    """The standard library's docstrings as a BEIR folder at `output` (duplicate ids keep the first)."""
    unique: dict[str, DocPair] = {}
    for pair in iter_doc_pairs(root):
        unique.setdefault(pair.doc_id, pair)
    return write_beir_folder(output, list(unique.values()), test_share)
