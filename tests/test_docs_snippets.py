"""Every fenced code block of README.md and docs/*.md runs as written (issue 38, item 2: the guide's API snippet
raised ImportError when copied).

Shell blocks: every `retromae ...` command (also after `accelerate launch`/`torchrun ... -m retromae`) is parsed by
the CLI's own parser, so a renamed command or option fails here; recipe scripts and make targets must exist; the
guide's retrieval chain runs on a tiny model and data set. Python blocks: each is executed with its data paths
and free names (`texts`, `my_batches_of_texts`) pointed at tiny fixtures, as `PYTHON_SNIPPETS` says; a block it does
not list fails the test, so a new snippet is run from the day it is written. The blocks that need the real
standard-library set or mteb also run as written in the slow suite.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import make_sentences, tiny_beir

from retromae.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
PYTHON_CALL = re.compile(r'\$\(python -c "[^"]*"\)')  # $(python -c "...print(folder)") in a shell block
RETRIEVAL_CHAIN = "retromae index  --embeddings runs/scifact-corpus"  # the guide's block run on tiny data


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language and its text."""

    path: Path
    line: int
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def code_blocks(language: str) -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) == language:
                found.append(Block(path, text[:match.start()].count("\n") + 1, language, match.group(2)))
    return found


def shell_lines(text: str, variables: dict[str, str]) -> Iterator[list[str]]:
    """The commands of a shell block as argument lists: continuations joined, comments dropped, `$(python -c ...)`
    and `$NAME` replaced from `variables` (a placeholder for others), assignments (`M=...`), a closing `&` skipped."""
    for line in text.replace("\\\n", " ").splitlines():
        line = PYTHON_CALL.sub(variables.get("PYTHON_CALL", "MODEL"), line)
        line = re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), f"{m.group(1)}-VALUE"), line)
        tokens = shlex.split(line, comments=True)
        while tokens and re.fullmatch(r"\w+=.*", tokens[0]):  # VAR=value before a command, or alone
            tokens = tokens[1:]
        if tokens[-1:] == ["&"]:  # a job sent to the background
            tokens = tokens[:-1]
        if tokens[:1] == ["nice"]:
            tokens = tokens[3:] if tokens[1:2] == ["-n"] else tokens[1:]
        if tokens:
            yield tokens


def retromae_arguments(tokens: list[str]) -> list[str] | None:
    """The arguments after `retromae` (also `.venv/bin/retromae`, after a wrapper such as `taskset -c 0`, or after
    `-m retromae` in a launcher's command), "..." placeholders dropped; None when the command is not ours."""
    program = next((i for i, token in enumerate(tokens) if token == "retromae" or token.endswith("/bin/retromae")),
                   None)
    if program is None:
        return None
    return [token for token in tokens[program + 1:] if token != "..."]


def check_other_command(block: Block, tokens: list[str]) -> None:
    """A command of another program: a make target must be ours, a recipe script must exist."""
    if tokens[0] == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
        assert set(tokens[1:]) <= set(targets), f"{block.where}: no make target {tokens[1:]}"
    for script in (token for token in tokens if token.startswith("recipes/")):
        assert (ROOT / script).is_file(), f"{block.where}: no such recipe {script}"


def test_every_shell_command_in_the_docs_parses():
    """A renamed command or option in the CLI (or a mistyped one in the docs) fails here."""
    commands = 0
    for block in code_blocks("bash"):
        for tokens in shell_lines(block.text, {}):
            arguments = retromae_arguments(tokens)
            if arguments is None:
                check_other_command(block, tokens)
                continue
            try:
                build_parser(arguments).parse_args(arguments)
            except SystemExit as error:
                pytest.fail(f"{block.where}: `retromae {shlex.join(arguments)}` does not parse (exit {error.code})")
            commands += 1
    assert commands >= 40  # the README, guide, RESULTS, probes and scaling commands


def tiny_sts(folder: Path) -> Path:
    """An STS Benchmark folder with sts-test.csv: 12 pairs, a sentence and its first words, graded 0-5."""
    folder.mkdir(parents=True)
    sentences = make_sentences(12, seed=4)
    rows = [f"main-captions\tMSRvid\t2012\t{i:04d}\t{i % 6}.0\t{text}\t{' '.join(text.split()[:3])}"
            for i, text in enumerate(sentences)]
    (folder / "sts-test.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


@pytest.fixture()
def data(tmp_path, monkeypatch) -> dict[str, Path]:
    """Tiny stand-ins for the docs' data, the working folder set to `tmp_path` (the snippets write runs/, out/)."""
    monkeypatch.chdir(tmp_path)
    tiny_beir(tmp_path / "beir")
    return {"beir": tmp_path / "beir", "sts": tiny_sts(tmp_path / "sts")}


def test_the_guides_retrieval_chain_runs(data, tiny_model_dir):
    block = next(b for b in code_blocks("bash") if RETRIEVAL_CHAIN in b.text)
    variables = {"PYTHON_CALL": str(tiny_model_dir), "M": str(tiny_model_dir), "S": str(data["beir"])}
    text = block.text.replace("../shared/data/sts/stsbenchmark", str(data["sts"]))
    ran = []
    for tokens in shell_lines(text, variables):
        arguments = retromae_arguments(tokens)
        assert main(arguments) == 0, f"{block.where}: retromae {shlex.join(arguments)}"
        ran.append(arguments[0])
    assert ran == ["encode", "encode", "index", "search", "index", "search", "search", "bm25", "evaluate", "evaluate",
                   "evaluate"]
    assert Path("runs/hybrid.trec").is_file() and (Path("runs/scifact-hybrid") / "bm25" / "params.json").is_file()
    assert Path("runs/dense.json").is_file() and Path("runs/minilm.json").is_file()


@dataclass(frozen=True)
class Snippet:
    """How a Python block runs on tiny data: its data paths replaced (values may name the fixtures as {beir},
    {sts}, {model}, {st}), sizes shrunk (not when run as written), names it uses without defining (made from the
    fixtures), and the block it continues."""

    paths: dict[str, str] = field(default_factory=dict)
    names: Callable[[dict[str, Any]], dict[str, Any]] = lambda paths: {}
    continues: str | None = None  # the first line of the block whose names this one uses
    shrink: dict[str, str] = field(default_factory=dict)


def test_the_readmes_first_evaluation_writes_the_report_folder(data, tiny_model_dir, capsys):
    """Issue 61, item 8: the README's `evaluate` line (an embedder, a BEIR folder) writes the report folder the docs
    describe, run as written with a tiny model and data set in place of MiniLM and `my_beir_folder`."""
    readme = next(block for block in code_blocks("bash")
                  if block.path.name == "README.md" and "retromae evaluate" in block.text)
    line = next(tokens for tokens in shell_lines(readme.text, {}) if tokens[1:2] == ["evaluate"])
    arguments = [{"sentence-transformers/all-MiniLM-L6-v2": str(tiny_model_dir), "my_beir_folder": "beir"}.get(
        token, token) for token in retromae_arguments(line)]
    assert main(arguments) == 0, f"{readme.where}: retromae {shlex.join(arguments)}"
    folder = Path(arguments[arguments.index("--output") + 1])
    written = sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()
                     and "embeddings" not in path.parts and not path.name.startswith("."))
    name = tiny_model_dir.name
    assert written == ["per-query.json", "results.csv", "results.json", "results.md", "results.png",
                       "retromae-run.json", "runs/beir/BM25.trec", f"runs/beir/{name}+BM25.trec",
                       f"runs/beir/{name}.trec"]
    assert f"{name}+BM25 NDCG@10" in capsys.readouterr().out


def encoder_inputs(paths: dict[str, Any]) -> dict[str, Any]:
    """The free names of the guide's retrieval API block: texts, ids, token ids, query vectors, id → text maps."""
    from transformers import AutoConfig, AutoTokenizer

    texts = make_sentences(6, seed=2)
    batch = AutoTokenizer.from_pretrained(paths["model"])(texts[:2], padding=True, return_tensors="pt")
    dimensions = AutoConfig.from_pretrained(paths["model"]).hidden_size
    corpus = {f"d{i}": text for i, text in enumerate(texts)}
    queries = {f"q{i}": " ".join(text.split()[:3]) for i, text in enumerate(texts)}
    return {"texts": texts, "ids": list(corpus), "input_ids": batch["input_ids"],
            "attention_mask": batch["attention_mask"], "query_vectors": np.ones((2, dimensions), dtype=np.float32),
            "corpus": corpus, "queries": queries}


def hybrid_index(paths: dict[str, Any]) -> dict[str, Any]:
    """The free name of the guide's Searcher block: a hybrid index of the tiny BEIR corpus."""
    import retromae

    docs = retromae.encode(model=str(paths["model"]), corpus=paths["beir"] / "corpus.jsonl", output="runs/s-docs",
                           pooling="mean", normalize=True, progress=False)
    return {"hybrid_index": retromae.index(embeddings=docs, output="runs/s-index", hybrid=True)}


# Each Python block of the docs, by its first line; the blocks that need the real set or mteb run as written in
# `test_the_slow_python_snippets_run_as_written`.
API_DEMO = "from pathlib import Path"
OWN_LOOP = "import torch"
PYTHON_SNIPPETS = {
    "from retromae.data.retrieval_sets import load_retrieval_set, load_sts_pairs, read_trec_run, write_trec_run":
        Snippet({"../shared/data/beir/scifact": "{beir}", "../shared/data/sts/stsbenchmark": "{sts}"}),
    "from retromae.models.encoder import Encoder": Snippet({'"path/or/hub-name"': '"{model}"'}, encoder_inputs),
    "from retromae.evaluation import evaluate_run, print_results, save_results": Snippet(),
    "# A command's config class: each option's domain is one word in its option(...)": Snippet(),
    "from retromae import Searcher": Snippet({'"runs/scifact-hybrid"': "hybrid_index"}, hybrid_index),
    "import retromae": Snippet({'"runs/ft/encoder"': '"{model}"', '"beir/scifact"': '"{beir}"',
                                '["scifact"]': '["beir"]'}),
    "import mteb": Snippet({"runs/ft/sentence-transformer": "{st}", "beir/scifact": "{beir}"}),
    API_DEMO: Snippet(shrink={'build_stdlib_retrieval_set(Path("api-demo/docs"))':
                              'copytree("{beir}", "api-demo/docs")',
                              "import retromae\n": "import retromae\nfrom shutil import copytree\n",
                              "max_steps=20": "max_steps=2", "batch_size=32": "batch_size=8",
                              "vocab_size=2000": "vocab_size=120"}),
    OWN_LOOP: Snippet({'"bert-base-uncased"': '"{model}"'},
                      lambda paths: {"my_batches_of_texts": [make_sentences(4, seed=s) for s in range(2)]}),
    "from transformers import Trainer, TrainingArguments":
        Snippet(names=lambda paths: {"list_of_texts": make_sentences(8)}, continues=OWN_LOOP,
                shrink={"max_steps=1000": "max_steps=2",
                        "per_device_train_batch_size=32": "per_device_train_batch_size=4"}),
}


def run_snippet(block: Block, paths: dict[str, Any], namespaces: dict[str, dict[str, Any]], as_written: bool) -> None:
    first = block.text.splitlines()[0]
    snippet = PYTHON_SNIPPETS.get(first)
    assert snippet is not None, f"{block.where}: a Python block no test runs: add it to PYTHON_SNIPPETS"
    text = block.text
    for old, new in {**snippet.paths, **({} if as_written else snippet.shrink)}.items():
        assert old in text, f"{block.where}: {old!r} is no longer in the block: update PYTHON_SNIPPETS"
        text = text.replace(old, new.format(**{key: str(value) for key, value in paths.items()}))
    namespace = dict(namespaces.get(snippet.continues or "", {}))
    namespace.update(snippet.names(paths))
    exec(compile(text, block.where, "exec"), namespace)  # noqa: S102  (our own documentation)
    namespaces[first] = namespace


# transformers' Trainer pins memory by default (the guide's Trainer snippet); only a machine without a GPU warns
@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true but no accelerator:UserWarning")
def test_every_python_snippet_in_the_docs_runs(data, tiny_model_dir):
    paths = {**data, "model": tiny_model_dir}
    namespaces: dict[str, dict[str, Any]] = {}
    blocks = code_blocks("python")
    assert {block.text.splitlines()[0] for block in blocks} == set(PYTHON_SNIPPETS)
    for block in blocks:
        if block.text.splitlines()[0] != "import mteb":
            run_snippet(block, paths, namespaces, as_written=False)
    assert Path("results.json").is_file() and Path("api-demo/finetune/encoder").is_dir()


@pytest.mark.slow
def test_the_slow_python_snippets_run_as_written(data, tiny_model_dir):
    """The API demo on the real standard-library set at its own sizes, and mteb on an exported model."""
    blocks = {block.text.splitlines()[0]: block for block in code_blocks("python")}
    paths: dict[str, Any] = {**data, "model": tiny_model_dir}
    run_snippet(blocks[API_DEMO], paths, {}, as_written=True)
    paths["st"] = Path("api-demo/finetune/sentence-transformer").resolve()
    run_snippet(blocks["import mteb"], paths, {}, as_written=True)
