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
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import retromae
from retromae.cli import main
from retromae.runtime.options import ConfigError, Options, _field_specs

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
        undeclared = set(arguments(signature)) - set(declared) - set(method.text_lists) - set(method.checks) - set(
            method.unchecked)
        assert not undeclared, f"{name}: {undeclared} neither checked nor declared unchecked"


def takes_texts(parameter: inspect.Parameter) -> bool:
    """Whether an argument is a sequence of texts (or a mapping of them): by its annotation."""
    return any(kind in str(parameter.annotation) for kind in ("Sequence[str]", "Mapping[str, str]"))


def test_every_argument_taking_texts_is_checked_as_texts():
    """An argument annotated as a sequence (or mapping) of texts is checked: as a list of texts (`text_lists`) or
    as the texts of an option (`Searcher.search`'s query, `run`'s queries)."""
    found = []
    for name, method, signature in public_methods():
        for argument, parameter in signature.parameters.items():
            if takes_texts(parameter) and argument not in getattr(method, "unchecked", ()):
                found.append(f"{name}.{argument}")
                assert argument in getattr(method, "text_lists", ()) or argument in getattr(
                    method, "checked_options", {}) or argument in getattr(method, "checks", {}), (
                    f"{name}({argument}=...) takes texts unchecked")
    assert {"Encoder.encode.texts", "Encoder.tokenize.texts", "Encoder.token_table.texts",
            "Searcher.run.queries"} <= set(found)


# What a method's own data (`checks`) takes, for an instance with the index `SELF` stands for
OWN_DATA = {"query_ids": ["q"], "vectors": np.zeros((1, 4), np.float32), "scores": {}}
SELF = types.SimpleNamespace(index=types.SimpleNamespace(d=4), lexical=None, folder="idx", ids=[], rows={})


def given_for(method: object, argument: str, value: object) -> dict[str, object]:
    """The required arguments of `method` (each "x", or what its own data takes), with `argument` set to `value`."""
    signature = inspect.signature(inspect.unwrap(method))
    given: dict[str, object] = {
        name: OWN_DATA[name] if name in method.checks else ["x"] if name in method.text_lists else {"q": "x"} if (
            "Mapping" in str(parameter.annotation)) else "x"
        for name, parameter in signature.parameters.items()
        if parameter.default is inspect.Parameter.empty and name not in ("self", "cls")}
    given[argument] = value
    return given


def _texts() -> object:
    yield "a"


BAD_TEXTS = {"one str": "apple pie", "bytes": b"apple", "None in it": [None], "numbers": [1, 2],
             "mapping": {"a": "b"}, "generator": _texts(), "a lone surrogate": ["a\udcff"], "a set": {"a"},
             "bytes in it": [b"a"]}
TEXT_LIST_CASES = [(name, argument) for name, method, _ in public_methods()
                   for argument in getattr(method, "text_lists", ())]


@pytest.mark.parametrize(("method_name", "argument"), TEXT_LIST_CASES, ids=[f"{m}-{a}" for m, a in TEXT_LIST_CASES])
def test_every_list_of_texts_refuses_what_is_no_list_of_texts(method_name, argument):
    """`Encoder.encode("apple pie")` encoded 9 texts, one per character, and `[None]`, `[1, 2]`, a mapping or a
    lone surrogate raised the tokenizer's bare errors: each is refused in one line naming the argument, and a list,
    a tuple or a numpy array of texts is taken, as a list of plain str."""
    class_name, _, attribute = method_name.partition(".")
    method = getattr(getattr(retromae, class_name), attribute)
    for what, value in BAD_TEXTS.items():
        with pytest.raises(ConfigError) as refused:
            method.check(SELF, **given_for(method, argument, value))
        message = str(refused.value)
        assert message.startswith(f"{argument}: ") and "\n" not in message and len(message) < 300, (what, message)
    for value in (["apple pie", ""], ("apple pie",), np.array(["apple", "pie"])):
        passed = method.check(SELF, **given_for(method, argument, value)).arguments[argument]
        assert type(passed) is list and all(type(text) is str for text in passed)
        assert passed == [str(text) for text in value]


class Lying(os.PathLike):
    """A path-like naming one folder the first time it is asked and another after: checked as the first, used as
    the second before."""

    def __init__(self, first: str, then: str) -> None:
        self.asked, self.first, self.then = 0, first, then

    def __fspath__(self) -> str:
        self.asked += 1
        return self.first if self.asked == 1 else self.then


def checked_scalars() -> list[tuple[str, str, str, type]]:
    """(Class.method, argument, option, the option's type) of every checked argument read as its option (no function
    of its own) whose option holds a whole number or a path."""
    found = []
    for name, method, _ in public_methods():
        for argument, spec in getattr(method, "checked_options", {}).items():
            if isinstance(spec, str):
                scalar = _field_specs(method.config_class)[spec].scalar
                field = next(field for field in dataclasses.fields(method.config_class) if field.name == spec)
                if scalar in (int, float, Path) or field.metadata.get("reads") is not None:
                    found.append((name, argument, spec, scalar))
    return found


@pytest.mark.parametrize(("method_name", "argument", "option", "scalar"), checked_scalars(),
                         ids=[f"{m}-{a}" for m, a, _, _ in checked_scalars()])
def test_every_checked_argument_reaches_the_method_as_checked(method_name, argument, option, scalar):
    """`search(k=3.0)` and `encode(batch_size=2.0)` passed the check and then raised TypeError: the method ran on
    the value given, not the value checked. It now gets what the check made of it, as a config's field holds it and as
    the command line reads `--top-k 3.0`: an int for a whole number given as a float, and a path-like's one path."""
    class_name, _, attribute = method_name.partition(".")
    method = getattr(getattr(retromae, class_name), attribute)
    field = next(field for field in dataclasses.fields(method.config_class) if field.name == option)
    if scalar is int:
        value = next(number for number in (3, 64, 1, 0) if in_domain(field, method.config_class, number))
        for given in (float(value), np.float32(value), np.int64(value)):
            passed = method.check(SELF, **given_for(method, argument, given)).arguments[argument]
            assert type(passed) is int and passed == value, (given, passed)
    elif scalar is float:
        passed = method.check(SELF, **given_for(method, argument, 1)).arguments[argument]
        assert type(passed) is float
    else:  # a path, or the name of a model (a folder)
        lying = Lying("/tmp", "/")
        passed = method.check(SELF, **given_for(method, argument, lying)).arguments[argument]
        assert lying.asked == 1 and os.fspath(passed) == "/tmp"


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
    given = given_for(method, argument, value)
    try:  # its own reader may refuse what it cannot read (`Searcher.run`'s queries: a mapping of texts)
        read_value = read(value) if read is not None and value is not None else value
    except ConfigError:
        read_value, unreadable = None, True
    else:
        unreadable = False
    refused = unreadable or (value is None and signature.parameters[argument].default is not None) or not in_domain(
        field, config_cls, read_value) or not passes_check(field, read_value)
    try:
        method.check(SELF, **given)
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
    # a whole number given as a float runs as the int it was checked as (before: TypeError from a slice)
    assert len(searcher.search("cats", k=3.0)) == 3 and len(searcher.search(["cats"], k=np.float32(2))[0]) == 2
    assert searcher.encoder.encode(["a", "b"], batch_size=2.0, max_length=8.0, show_progress=False).shape[0] == 2
    with pytest.raises(ConfigError, match="^texts: expected a list of texts, got one text"):
        searcher.encoder.encode("apple pie")  # before: 9 vectors, one per character
    with pytest.raises(ConfigError, match="^queries: expected a mapping of query ids to texts"):
        searcher.run(["cats"])
    capsys.readouterr()
    for args in (["--query", ""], ["--query", "x", "--top-k", "2.5"], ["--query", "x", "--top-k", "0"]):
        assert main(["search", "--index", str(tmp_path / "i"), *args]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
