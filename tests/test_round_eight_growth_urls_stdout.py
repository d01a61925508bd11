"""Round eight of the hostile-input audit, sections 6, 8 and 10 (standard output), each at one rule.

- A tokenizer.json of a few KB whose normalizer made every "e" 4,000 characters cost 27 s and 2.9 GB for 50 short
  documents: the tokenizers library reads a whole text before it cuts it to its tokens. What a tokenizer's normalizer
  and pre-tokenizer may make of a text is bounded where every loader reads a tokenizer
  (`models.model_source.check_tokenizer_growth`, from `check_tokenizer_reads`): the strings its steps put in place of
  characters, multiplied, and its steps run one at a time on a sample text. Real tokenizers pass.
- $HF_ENDPOINT, $HTTPS_PROXY or $https_proxy with a port beyond 65535, no number for a port or a '[' without its ']'
  ended the hub probe in a ValueError traceback (and an unclosed '[' in $HF_ENDPOINT ended every command, in
  huggingface_hub's import). One reader (`preflight.url_variable`), asked by every command before any work
  (`preflight.check_network_settings`).
- Standard output closed (`>&-`): `evaluate --run` and `search --query` exited 0 with their results lost; a failed
  write said "No space left on device" naming no stream. Every command now refuses a closed standard output first,
  and names it when a write fails; a reader that goes away (`| head -1`) still ends nothing (`runtime.console.
  standard_output`, entered by `cli.main`).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import command_inputs, error_line, make_sentences, tiny_beir
from test_output_paths import CASES

from retromae.cli import main
from retromae.models.encoder import Encoder
from retromae.models.masked_lm import load_masked_lm
from retromae.models.model_source import MAX_DECLARED_GROWTH, _declared_growth, check_tokenizer_growth
from retromae.models.tokenizer_training import KINDS, train_tokenizer
from retromae.preflight import URL_VARIABLES, url_variable
from retromae.pretraining.scratch import existing_tokenizer
from retromae.reranking.run import _load_classifier
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.lines import quoted
from retromae.runtime.options import ConfigError


def command_line(case: tuple[str, str], folder: Path, **words: object) -> list[str]:
    """The CASES command line of `case` with its letters as paths under `folder` (nothing there) or as `words`."""
    out = folder / "out"
    given = {"OUT": out, "OUT.trec": out, "OUT.json": out, "OUT.jsonl": out, **words}
    return [str(given.get(word, folder / word if len(word) == 1 and word.isupper() else word))
            for word in CASES[case].split()]


# Section 6: what a tokenizer's normalizer and pre-tokenizer may make of a text

LOADERS = {  # every way a command reads a tokenizer: all through `pretrained.load_tokenizer`
    "encoder (encode, search, evaluate, mine, finetune, adapt)": lambda folder: Encoder.load(folder, device="cpu"),
    "masked LM (pretrain and its token store)": lambda folder: load_masked_lm(str(folder)),
    "cross-encoder (score, train-reranker)": lambda folder: _load_classifier(str(folder), trained=False),
    "init-model --tokenizer": lambda folder: existing_tokenizer(str(folder)),
}
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
AMPLIFIERS = {  # steps added to a real tokenizer's, and the words of their refusal
    "the audit's: a Replace of 'e' by 4,000 characters": (
        [{"type": "Replace", "pattern": {"String": "e"}, "content": "e " * 2000}], [],
        "its normalizer may make 4,000 characters of one (a Replace of 'e' by 4,000 characters), more than the 64 "
        "of any real tokenizer's: every text would cost that many times its length to read"),
    "a letter no sample holds, doubled twelve times": (
        [{"type": "Replace", "pattern": {"String": "ꙮ"}, "content": "ꙮꙮ"}] * 12, [],
        "its normalizer may make 4,096 characters of one (12 × a Replace of 'ꙮ' by 2 characters)"),
    "a regular expression matching between characters": (
        [{"type": "Replace", "pattern": {"Regex": ""}, "content": "ab"}] * 4, [],
        "its normalizer may make 81 characters of one (4 × a Replace of '' by 2 characters)"),
    "a Prepend before every piece": ([{"type": "Prepend", "prepend": "▁" * 100}], [],
                                     "its normalizer may make 101 characters of one (a Prepend of 100 characters)"),
    "byte-level pre-tokenizers stacked": (
        [], [BYTE_LEVEL] * 6,
        r"its normalizer and pre-tokenizer make 2,304 characters of a sample text of 337 by their ByteLevel step, "
        "more than the 4 times as many of any real tokenizer"),
}


def amplified(folder: Path, normalizers: list, pre_tokenizers: list) -> Path:
    """`folder`'s tokenizer.json with `normalizers` after its normalizer and `pre_tokenizers` after its own."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    if normalizers:
        data["normalizer"] = {"type": "Sequence", "normalizers": [data["normalizer"], *normalizers]}
    if pre_tokenizers:
        data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [data["pre_tokenizer"], *pre_tokenizers]}
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("case", AMPLIFIERS)
def test_every_loader_refuses_a_tokenizer_that_multiplies_characters(case, loader, tiny_model_dir, tmp_path):
    normalizers, pre_tokenizers, words = AMPLIFIERS[case]
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    path = amplified(folder, normalizers, pre_tokenizers)
    with pytest.raises(ModelLoadError) as refused:
        LOADERS[loader](folder)
    assert str(refused.value).startswith(f"{path}: {words}") and "\n" not in str(refused.value), str(refused.value)


def test_a_command_refuses_such_a_tokenizer_in_one_line_and_claims_nothing(tiny_model_dir, tmp_path, capsys):
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    amplified(folder, *AMPLIFIERS["the audit's: a Replace of 'e' by 4,000 characters"][:2])
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "text": text}) + "\n"
                              for i, text in enumerate(make_sentences(8))))
    assert main(["encode", "--model", str(folder), "--corpus", str(corpus), "--output", str(tmp_path / "out")]) == 2
    assert error_line(capsys).startswith(f"retromae: error: {folder / 'tokenizer.json'}: its normalizer may make "
                                         "4,000 characters of one")
    assert not (tmp_path / "out").exists()


FAMILIES = (*KINDS, "roberta", "xlm-roberta", "deberta-v2")


def real_tokenizer(family: str):
    """The pipeline of a family a model may come with: init-model's three kinds, and transformers' own RoBERTa
    (GPT-2's and ModernBERT's byte-level steps), XLM-R and DeBERTa-v2 (Metaspace, a Replace, NFC)."""
    from transformers import DebertaV2Tokenizer, RobertaTokenizer, XLMRobertaTokenizer

    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("<mask>", 0.0), ("▁a", -1.0)]
    if family in KINDS:
        return train_tokenizer(make_sentences(50), family, 120)
    if family == "roberta":
        return RobertaTokenizer(vocab={"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4}, merges=[])
    return (XLMRobertaTokenizer if family == "xlm-roberta" else DebertaV2Tokenizer)(vocab=pieces)


@pytest.mark.parametrize("family", FAMILIES)
def test_real_tokenizers_pass(family):
    check_tokenizer_growth(real_tokenizer(family), family)


def test_a_sentencepiece_map_is_weighed_by_its_longest_replacement():
    """A Precompiled map: 4 bytes of trie size, the trie, then its replacements, each ended by a NUL. The real one of
    XLM-R and DeBERTa-v3 (sentencepiece's nmt_nfkc) holds 18 characters at most, NFKC's of U+FDFA."""
    charsmap = (8).to_bytes(4, "little") + bytes(8) + b"ab\0" + "ﷺ".encode() * 100 + b"\0"
    spec = {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()}
    assert _declared_growth(spec) == (100, "a Precompiled map with replacements of up to 100 characters")
    assert 18 * 2 < MAX_DECLARED_GROWTH  # XLM-R's map, and a Replace by a space of a regular expression's match


# Section 8: the hub's URL variables

MALFORMED = {"a port beyond 65535": "http://proxy:99999", "a port that is no number": "http://proxy:abc",
             "port 0": "http://proxy:0", "an unclosed '['": "http://[::1", "no host": "http://:8080"}


@pytest.fixture()
def no_probe(monkeypatch):
    """No URL variable set, HF_HUB_OFFLINE unset, and a connection a failure of the test (none is reachable here)."""
    for name in (*URL_VARIABLES, "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)

    def connect(*args, **kwargs):
        raise AssertionError(f"the hub was probed: {args}")

    monkeypatch.setattr(socket, "create_connection", connect)


@pytest.mark.parametrize("form", MALFORMED)
@pytest.mark.parametrize("name", URL_VARIABLES)
def test_a_malformed_url_variable_is_refused_in_one_line_before_the_hub_is_probed(name, form, no_probe, monkeypatch,
                                                                                  tmp_path, capsys):
    monkeypatch.setenv(name, MALFORMED[form])
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "1", "text": "a text"}\n')
    assert main(["encode", "--model", "owner/name", "--corpus", str(corpus), "--output", str(tmp_path / "out")]) == 2
    assert error_line(capsys) == (f"retromae: error: {name}={quoted(MALFORMED[form])}: not a URL with a host and a "
                                  "port from 1 to 65535 (http://HOST:PORT); fix or unset it")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_every_command_refuses_a_malformed_hub_endpoint_before_any_work(case, no_probe, monkeypatch, tmp_path,
                                                                        capsys):
    """An unclosed '[' in $HF_ENDPOINT ended every command, with local models or none: huggingface_hub's import splits
    it."""
    monkeypatch.setenv("HF_ENDPOINT", "http://[::1")
    assert main(command_line(case, tmp_path)) == 2
    assert error_line(capsys).startswith("retromae: error: HF_ENDPOINT='http://[::1': not a URL with a host")
    assert not (tmp_path / "out").exists()


def test_a_malformed_hub_endpoint_is_one_line_in_a_fresh_process(tmp_path):
    """Where huggingface_hub is not imported yet: its import is what failed."""
    tiny_beir(tmp_path / "beir")
    (tmp_path / "run.trec").write_text("q36 Q0 d36 1 1.0 x\n")
    done = subprocess.run([sys.executable, "-m", "retromae", "evaluate", "--run", str(tmp_path / "run.trec"),
                           "--data", str(tmp_path / "beir")], capture_output=True, text=True,
                          env={**os.environ, "HF_ENDPOINT": "http://[::1"}, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "retromae: error: HF_ENDPOINT='http://[::1': not a URL with a host and a port from 1 to " \
                          "65535 (http://HOST:PORT); fix or unset it\n"


@pytest.mark.parametrize(("value", "address"), [
    ("proxy:3128", ("proxy", 3128)), ("http://proxy", ("proxy", 80)), ("https://hub.example.org/", ("hub.example.org",
                                                                                                   443)),
    ("http://user:secret@proxy:8080", ("proxy", 8080)), ("http://[::1]:3128", ("::1", 3128)), ("  ", None)])
def test_well_formed_url_variables_are_read_as_the_hub_client_reads_them(value, address, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", value)
    assert url_variable("HTTPS_PROXY") == address


def test_the_url_reader_refuses_as_a_config_error(monkeypatch):
    monkeypatch.setenv("https_proxy", "proxy:99999")
    with pytest.raises(ConfigError, match=r"^https_proxy='proxy:99999': not a URL"):
        url_variable("https_proxy")


# Section 10: standard output closed, full, or read no further

CLOSED = ("retromae: error: standard output is closed (`>&-`): the command prints what it found or wrote there; "
          "redirect it to a file, or to /dev/null to drop it")
FULL = "retromae: error: standard output: No space left on device; what the command printed there is lost"


@pytest.fixture(scope="module")
def run_file(tmp_path_factory) -> tuple[Path, Path]:
    """A BEIR folder and a run of it with many ranks (its metrics table is longer with many --k-values)."""
    folder = tmp_path_factory.mktemp("evaluate")
    tiny_beir(folder / "beir")
    (folder / "run.trec").write_text("".join(f"q{q} Q0 d{d} {d + 1} {1 / (d + 1)} x\n"
                                             for q in range(36, 48) for d in range(48)))
    return folder / "beir", folder / "run.trec"


def evaluate_line(run_file, *more: str) -> list[str]:
    beir, run = run_file
    return ["evaluate", "--run", str(run), "--data", str(beir), *more]


def retromae(arguments: list[str], shell_redirect: str = "", **options) -> subprocess.CompletedProcess:
    """`retromae ARGUMENTS` in a fresh process, standard output as `shell_redirect` makes it (`>&-`, `>/dev/full`)."""
    command = [sys.executable, "-m", "retromae", *arguments]
    if shell_redirect:
        command = ["bash", "-c", f'"$@" {shell_redirect}', "bash", *command]
    return subprocess.run(command, stderr=subprocess.PIPE, text=True, timeout=60, **options)


@pytest.mark.parametrize(("redirect", "said"), [(">&-", CLOSED), (">/dev/full", FULL)], ids=["closed", "full"])
def test_evaluate_says_its_standard_output_is_closed_or_full(redirect, said, run_file):
    done = retromae(evaluate_line(run_file), redirect)
    assert (done.returncode, done.stderr) == (1, said + "\n")


def test_a_closed_standard_error_is_read_as_dev_null(run_file, tmp_path):
    """`2>&-`: a refusal, a warning and a note went to standard output, among the results (`print` to a None file
    writes there); they are dropped, as `2>/dev/null` would, and the results stay alone on standard output."""
    command = ["bash", "-c", '"$@" 2>&-', "bash", sys.executable, "-m", "retromae"]
    refused = subprocess.run([*command, *evaluate_line(run_file, "--k-values", "0")], capture_output=True, text=True,
                             timeout=60)
    assert (refused.returncode, refused.stdout) == (2, "")
    (tmp_path / "run.trec").write_text(run_file[1].read_text() + "q36 Q0 elsewhere 49 0.001 x\n")  # warned of
    done = subprocess.run([*command, "evaluate", "--run", str(tmp_path / "run.trec"), "--data", str(run_file[0])],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(f"{tmp_path / 'run.trec'} on "), done.stdout
    assert "missing from" not in done.stdout and "elsewhere" not in done.stdout


def test_a_reader_that_goes_away_ends_nothing(run_file):
    """`| head -1`: the reader chose to read no more; the command ends as it would, without a word."""
    done = subprocess.Popen([sys.executable, "-m", "retromae", *evaluate_line(run_file, "--k-values",
                                                                              *map(str, range(1, 200)))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done.stdout.close()
    assert (done.wait(timeout=60), done.stderr.read()) == (0, "")


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_every_command_refuses_a_closed_standard_output_before_any_work(case, monkeypatch, tmp_path, capsys):
    """A closed descriptor 1 is the next file opened: what a library writes to standard output would land in it."""
    monkeypatch.setattr(sys, "stdout", None)  # as Python leaves it when descriptor 1 is closed at start
    assert main(command_line(case, tmp_path)) == 1
    assert error_line(capsys) == CLOSED
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    return command_inputs(tmp_path_factory.mktemp("inputs"), tiny_model_dir)


@pytest.mark.parametrize("command", ["search --query", "evaluate --run"])
def test_a_command_printing_its_result_on_a_full_device_says_so(command, inputs, run_file, monkeypatch, capsys):
    arguments = (["search", "--index", str(inputs["I"]), "--query", "a cat"] if command == "search --query"
                 else evaluate_line(run_file))
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        assert main(arguments) == 1
    assert error_line(capsys) == FULL
