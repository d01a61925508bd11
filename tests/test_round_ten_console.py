"""Round ten, what a user sees (`runtime/console.py`), each at one rule:

- The lines a training says as it goes (the checkpoint resumed from, none found, the schedule of a longer resume, the
  precision chosen, the vocabulary loss chosen) go through `say`: standard output in the CLI, on the main process
  only; silent within a Python API call unless asked (`speaking`).
- Under a standard output that cannot encode them, the tool's own symbols show as ASCII stand-ins (`fitted`), a
  user's text (`given`) as escapes, never stood in for.
- A path in a line on standard output stays in that line (`given`).
- transformers' own handler writes its records as ours are written under --verbose (`_printable_transformers`).
- NO_PROXY is read as the hub's client reads it, an entry that names no host refused (`preflight.no_proxy`).
"""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx2
import pytest
import torch
from conftest import error_line
from httpx2._utils import URLPattern, get_environment_proxies
from test_output_paths import CASES

from retromae.cli import main
from retromae.preflight import bypasses_proxy, check_settings, hub_unreachable
from retromae.runtime.console import STAND_INS, fitted, given, library_output, say, speaking, wrote
from retromae.runtime.errors import ConfigError
from retromae.training.checkpoints import resume_from
from retromae.training.optimizer import resume_schedule

# Item 1: a training's notes.

SRC = Path(__file__).resolve().parents[1] / "src" / "retromae"


def test_no_module_prints_but_the_console():
    """`accelerator.print` (and `print`) bypass the console's rules: no module but the console and the CLI's refusals
    calls them."""
    calls = [f"{path.relative_to(SRC)}:{number}" for path in SRC.rglob("*.py")
             if path.name not in ("console.py", "cli.py")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"(^|[^\w.])print\(|accelerator\.print\(", line.split("#")[0])]
    assert calls == []


def no_checkpoint(accelerator, tmp_path):
    config = SimpleNamespace(output=tmp_path / "run\nx", resume=True, save_every=0)
    resume_from(config, {}, None, None, None, accelerator)


def longer_schedule(accelerator, tmp_path):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / 20)
    optimizer.param_groups[0]["lr"] = 0.0  # a finished 10-step run's rate
    resume_schedule(scheduler, 10, 20, accelerator)


SITES = {"no checkpoint": (no_checkpoint, "no checkpoint under "),
         "longer schedule": (longer_schedule, "--max-steps 20: the learning rate follows")}


def accelerator(main_process: bool) -> SimpleNamespace:
    return SimpleNamespace(is_main_process=main_process, num_processes=1)


@pytest.mark.parametrize("site", SITES)
def test_a_training_note_is_said_on_the_main_process_as_the_cli_says_it(site, tmp_path, capsys):
    run, start = SITES[site]
    run(accelerator(True), tmp_path)
    out, err = capsys.readouterr()
    assert out.startswith(start) and out.count("\n") == 1 and err == ""
    run(accelerator(False), tmp_path)
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("site", SITES)
def test_a_training_note_is_silent_in_the_python_api_unless_asked(site, tmp_path, capsys):
    run, start = SITES[site]
    with speaking(False):
        run(accelerator(True), tmp_path)
    assert capsys.readouterr() == ("", "")
    with speaking(False), speaking(True):
        run(accelerator(True), tmp_path)
    assert capsys.readouterr().out.startswith(start)


# Items 2 and 3: our symbols and a user's text under a standard output that cannot encode them.

def stream(encoding: str) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="strict")


@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "utf-8"])
@pytest.mark.parametrize("symbol", STAND_INS)
def test_our_symbols_show_as_stand_ins_where_the_encoding_lacks_them(symbol, encoding):
    shown = fitted(f"a {symbol} b", stream(encoding))
    kept = symbol.encode(encoding, "ignore").decode(encoding) == symbol
    assert shown == f"a {symbol if kept else STAND_INS[symbol]} b"
    shown.encode(encoding)


USER_TEXTS = {"a path with our symbols": "données·✓/a → b", "a newline": "run\n2", "an ESC": "a\x1b[2Jb",
              "a line separator": "a\u2028b", "a stand-in's symbol alone": "…"}


@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "utf-8"])
@pytest.mark.parametrize("text", USER_TEXTS)
def test_a_users_text_stays_in_its_line_and_is_escaped_never_stood_in_for(text, encoding, monkeypatch):
    """`given` reads standard output's encoding (the CLI's or the API caller's stream)."""
    monkeypatch.setattr(sys, "stdout", stream(encoding))
    value = USER_TEXTS[text]
    line = fitted(f"random bert → {given(value)}", sys.stdout)
    ours, theirs = line.split(" ", 3)[2:]
    assert "\n" not in line and "\x1b" not in line
    assert ours == ("→" if encoding == "utf-8" else "->")
    expected = value if encoding == "utf-8" else value.encode(encoding, "backslashreplace").decode(encoding)
    assert theirs == expected.replace("\n", "\\n").replace("\x1b", "\\x1b").replace("\u2028", "\\u2028")


def test_wrote_keeps_each_path_in_its_line_escaped_under_ascii(monkeypatch):
    monkeypatch.setattr(sys, "stdout", stream("ascii"))
    assert wrote({"encoder": Path("données·\n✓")}) == "done; wrote:\n  encoder  donn\\xe9es\\xb7\\n\\u2713"


def test_say_under_ascii_stands_in_for_ours_and_escapes_theirs(capsys, monkeypatch):
    captured = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(captured, encoding="ascii", errors="strict"))
    say(f"resumed from {given('données·ckpt')} · 3 steps → done…")
    sys.stdout.flush()
    assert captured.getvalue() == b"resumed from donn\\xe9es\\xb7ckpt - 3 steps -> done...\n"


# Item 4: transformers' handler under --verbose.

def test_transformers_records_under_verbose_are_one_printable_line_and_its_format_is_restored(capsys):
    from transformers.utils import logging as transformers_logging

    logger = transformers_logging.get_logger("transformers.modeling_utils")
    handler = logging.getLogger("transformers").handlers[0]
    before = handler.formatter
    stream_before, handler.stream = handler.stream, sys.stderr  # made at import: the capture of its time
    try:
        with library_output(True):
            logger.warning("weights of %s not used", "x\x1b[31m\nname")
    finally:
        handler.stream = stream_before
    assert capsys.readouterr().err == "weights of x\\x1b[31m\\nname not used\n"
    assert handler.formatter is before


# Item 5: NO_PROXY.

PROXY = "http://127.0.0.1:9"
NO_PROXY_HOSTS = ["*", "huggingface.co", ".huggingface.co", "*.huggingface.co", "co", ".co", "*.co", "hugging",
                  "ingface.co", "HuggingFace.CO", "huggingface.co:443", "example.com, huggingface.co",
                  "https://huggingface.co", "http://huggingface.co", "10.0.0.0/8", "::1", "[::1]", "localhost", ""]


@pytest.mark.parametrize("value", NO_PROXY_HOSTS)
@pytest.mark.parametrize("name", ["NO_PROXY", "no_proxy"])
def test_no_proxy_exempts_the_hub_as_its_client_does(name, value, monkeypatch):
    for variable in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", PROXY)
    monkeypatch.setenv(name, value)
    mounts, url = get_environment_proxies(), httpx2.URL("https://huggingface.co/api")
    first = min((pattern for pattern in map(URLPattern, mounts) if pattern.matches(url)),
                key=lambda pattern: pattern.priority, default=None)  # the client's choice
    assert bypasses_proxy("huggingface.co") == (first is None or mounts[first.pattern] is None)


def test_the_probe_asks_the_hub_not_the_proxy_it_is_exempt_from(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert "proxy.invalid:3128" in hub_unreachable(1.0)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert "127.0.0.1:9" in hub_unreachable(1.0)


def test_a_lowercase_no_proxy_wins_even_empty(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "huggingface.co")
    monkeypatch.setenv("no_proxy", "")
    assert not bypasses_proxy("huggingface.co")


UNREAD = ["a b", "[::1", "http://[", "host/path", "ünï.de", "a..b", "1.2.3.4/33", "huggingface.co,\x1b[2J"]


@pytest.mark.parametrize("value", UNREAD)
def test_a_no_proxy_entry_that_names_no_host_is_refused(value, monkeypatch):
    monkeypatch.setenv("NO_PROXY", value)
    with pytest.raises(ConfigError, match=r"^NO_PROXY='.*': '.*' names no host .* fix or unset it$") as raised:
        check_settings()
    assert "\n" not in str(raised.value) and "\x1b" not in str(raised.value)


@pytest.mark.parametrize("case", CASES)
def test_every_command_refuses_a_no_proxy_entry_that_names_no_host(case, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("no_proxy", "example.com, a b")
    out = tmp_path / "out"
    words = [str(out) if word.startswith("OUT") else str(tmp_path / word) if word.isupper() else word
             for word in CASES[case].split()]
    assert main(words) == 2
    assert error_line(capsys) == ("retromae: error: no_proxy='example.com, a b': 'a b' names no host (HOST, .DOMAIN, "
                                  "*.DOMAIN, an IP address or network, a URL, or *), so the proxies would be used for "
                                  "the one meant; fix or unset it")
    assert not out.exists()
