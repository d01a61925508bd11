"""One validation for the Python API and the command line (issue 63, item 7).

`Searcher.search("x", k="3")` and `k=2.5` raised bare Python errors and `search("")` returned ten hits, where
`retromae search` refuses each in one line. The arguments of the API's public classes that stand for a command's
options are checked by that option's own check (`runtime.options.checked_arguments` over `check_values`). The walk
is generated: every public class `retromae` offers, every public method taking an argument named like an option
(or `k`) must declare each of its arguments checked or not an option, and every checked argument is tried with the
values of the option-domain walk (tests/test_option_domains.py) and refused exactly when they lie outside.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path

import pytest

import retromae
from retromae.cli import main
from retromae.runtime.options import ConfigError, Options

sys.path.insert(0, str(Path(__file__).parent))
from test_option_domains import API_VALUES, commands, in_domain  # noqa: E402  (the registry walk of the CLI)

OPTION_NAMES = {field.name for command in commands() for field in dataclasses.fields(command.config_cls)} | {"k"}


def public_methods() -> list[tuple[str, object, inspect.Signature]]:
    """(Class.method, the method, its signature) of every public class of `retromae` but the configs, and its public
    methods."""
    found = []
    for name in retromae.__all__:
        value = getattr(retromae, name)
        if not inspect.isclass(value) or issubclass(value, Options):  # a config checks itself (`check_fields`)
            continue
        for attribute, member in vars(value).items():
            function = member.__func__ if isinstance(member, classmethod | staticmethod) else member
            if not attribute.startswith("_") and inspect.isfunction(function):
                found.append((f"{name}.{attribute}", getattr(value, attribute), inspect.signature(function)))
    return found


def arguments(signature: inspect.Signature) -> list[str]:
    return [name for name in signature.parameters if name not in ("self", "cls")]


def test_every_public_method_taking_an_option_declares_how_each_argument_is_checked():
    taking_options = [(name, method, signature) for name, method, signature in public_methods()
                      if set(arguments(signature)) & OPTION_NAMES]
    assert {"Searcher.load", "Searcher.search", "Searcher.run", "Encoder.load", "Encoder.encode"} <= {
        name for name, _, _ in taking_options}
    for name, method, signature in taking_options:
        declared = getattr(method, "checked_options", None)
        assert declared is not None, f"{name} takes options ({set(arguments(signature)) & OPTION_NAMES}) unchecked"
        undeclared = set(arguments(signature)) - set(declared) - set(method.unchecked)
        assert not undeclared, f"{name}: {undeclared} neither checked nor declared unchecked"


def passes_check(field: dataclasses.Field, value: object) -> bool:
    """Whether the option's own `check` (a faiss string, a non-blank query) takes each of its values."""
    check = field.metadata.get("check")
    try:
        for item in value if isinstance(value, list) else [value]:
            if check is not None and item is not None:
                check(item)
    except ValueError:
        return False
    return True


def cases() -> list[tuple[str, str, object]]:
    found = []
    for name, method, _ in public_methods():
        for argument in getattr(method, "checked_options", {}):
            found += [(name, argument, value) for value in API_VALUES]
    return found


@pytest.mark.parametrize(("method_name", "argument", "value"), cases(),
                         ids=[f"{m}-{a}-{v!r}" for m, a, v in cases()])
def test_every_checked_argument_is_refused_exactly_outside_its_option_s_domain(method_name, argument, value):
    class_name, _, attribute = method_name.partition(".")
    method = getattr(getattr(retromae, class_name), attribute)
    signature = inspect.signature(inspect.unwrap(method))
    spec = method.checked_options[argument]
    option, read = (spec, None) if isinstance(spec, str) else spec
    config_cls = method.config_class
    field = next(field for field in dataclasses.fields(config_cls) if field.name == option)
    given = {name: "x" for name, parameter in signature.parameters.items()
             if parameter.default is inspect.Parameter.empty and name not in ("self", "cls")}
    given[argument] = value
    read_value = read(value) if read is not None and value is not None else value
    refused = (value is None and signature.parameters[argument].default is not None) or not in_domain(
        field, config_cls, read_value) or not passes_check(field, read_value)
    try:
        method.check(None, **given)
    except ConfigError as error:
        assert refused, f"{method_name}({argument}={value!r}) refused: {error}"
        assert str(error).startswith(f"{argument}: ") and "\n" not in str(error)
    else:
        assert not refused, f"{method_name}({argument}={value!r}) accepted"


def test_a_searcher_checks_as_the_command_does(tiny_model_dir, tmp_path, capsys):
    """The audit's cases on a real index: each refused in one line by the API and by the command alike."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(n), "text": f"document {n} about cats"}) + "\n"
                              for n in range(12)))
    assert main(["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--output", str(tmp_path / "e"),
                 "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(tmp_path / "e"), "--output", str(tmp_path / "i")]) == 0
    searcher = retromae.Searcher.load(tmp_path / "i")
    for call, said in ((lambda: searcher.search("x", k="3"), "k: expected a whole number, got the text '3'"),
                       (lambda: searcher.search("x", k=2.5), "k: expected a whole number, got 2.5"),
                       (lambda: searcher.search(""), "query: must not be empty"),
                       (lambda: searcher.search(["cats", " "]), "query: must not be empty"),
                       (lambda: searcher.search("x", k=0), "k: must lie in [1, 100000]")):
        with pytest.raises(ConfigError) as refused:
            call()
        assert str(refused.value).startswith(said)
    assert len(searcher.search("cats", k=3)) == 3
    capsys.readouterr()
    for args in (["--query", ""], ["--query", "x", "--top-k", "2.5"], ["--query", "x", "--top-k", "0"]):
        assert main(["search", "--index", str(tmp_path / "i"), *args]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
