"""An option either acts or is refused (issue 63, item 2).

`evaluate --hybrid-weight 0.2` without `--hybrid`, `evaluate --hybrid --fusion rrf --hybrid-weight 0.3` and `search
--queries EMB --query-max-length 4` ran and ignored the option. Each option that acts only under a condition declares
it once (`runtime.options.Acts`, on its field or in its command's `ACTS`), and one check (`check_acts`) refuses it
elsewhere, for the command line, config files and the Python API alike. Generated over every command of the CLI and
every option that declares a condition: given a value, with the other options set each way the declaration says it
does not act, it is refused in one line naming it; set the way it acts, it is not refused for that.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import bare_config

from retromae.cli import main
from retromae.runtime.options import ConfigError, _field_specs, build_config, choices_of, conditions

sys.path.insert(0, str(Path(__file__).parent))
from test_option_domains import commands, required_values  # noqa: E402  (the registry walk of the CLI)


def another_value(config_cls: type, field: dataclasses.Field) -> Any:
    """A value of `field` inside its declaration and other than its default: what a user gives."""
    spec = _field_specs(config_cls)[field.name]
    default = field.default if field.default is not dataclasses.MISSING else None
    choices = choices_of(field)
    if choices:
        value = next(choice for choice in choices if choice != default and choice != [default])
    elif spec.scalar is bool:
        value = not default
    elif spec.scalar in (int, float):
        domain = field.metadata.get("domain")
        value = 1 if default is None else default + 1
        if domain is not None and not domain.holds(value):
            value = (default or 1) / 2 if spec.scalar is float else max(int(domain.low or 1), 1)
        value = spec.scalar(value)
    else:
        value = next(text for text in ("x2", "efSearch=16", "HNSW32", "cpu") if _passes(field, text))
    return [value] if spec.is_list else value


def _passes(field: dataclasses.Field, text: str) -> bool:
    """Whether the option's own `check` (a faiss string, a device name) takes `text`."""
    try:
        field.metadata["check"] and field.metadata["check"](text)
    except ValueError:
        return False
    return True




CASES = [(command.name, command.config_cls, name, n) for command in commands()
         for name, acts in conditions(command.config_cls).items() for n in range(len(acts.off))]


@pytest.mark.parametrize(("command", "config_cls", "name", "n"), CASES, ids=[f"{c}-{o}-{n}" for c, _, o, n in CASES])
def test_an_option_given_where_it_does_not_act_is_refused(command, config_cls, name, n, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "." is a folder (an embeddings folder where `search` wants one)
    acts = conditions(config_cls)[name]
    field = next(f for f in dataclasses.fields(config_cls) if f.name == name)
    given = {name: another_value(config_cls, field)}
    base = required_values(config_cls, skip=name)
    off = {**base, **acts.off[n], **given}
    unset = bare_config(config_cls, **off)  # placeholders of other options that would not act here are left out
    quiet = {key: value for key, value in base.items()
             if key == name or key not in conditions(config_cls) or conditions(config_cls)[key].holds(unset)}
    with pytest.raises(ConfigError) as refused:
        build_config(config_cls, {**quiet, **acts.off[n], **given})
    message = str(refused.value)
    assert message.startswith(f"--{name.replace('_', '-')}: acts only {acts.says}") and "\n" not in message
    try:
        build_config(config_cls, {**base, **acts.on, **given})
    except ConfigError as error:  # refused for another reason (a placeholder path), never for this one
        assert "acts only" not in str(error) or not str(error).startswith(f"--{name.replace('_', '-')}:"), error


def test_every_command_with_conditional_options_is_walked():
    walked = {command for command, *_ in CASES}
    assert {"evaluate", "search", "index", "encode", "bm25", "mine", "pretrain", "adapt", "finetune",
            "train-reranker"} <= walked
    assert len(CASES) >= 60, len(CASES)


def test_the_audit_s_cases_through_the_command_line_and_a_config_file(tiny_model_dir, tmp_path, capsys):
    data, index, emb = tmp_path / "data", tmp_path / "idx", tmp_path / "emb"
    for folder in (data, index, emb):
        folder.mkdir()
    config = tmp_path / "c.yaml"
    config.write_text("hybrid_weight: 0.2\n")
    model = str(tiny_model_dir)
    cases = {
        ("evaluate", "--model", model, "--data", str(data), "--hybrid-weight", "0.2"): "--hybrid-weight",
        ("evaluate", "--model", model, "--data", str(data), "--hybrid", "--fusion", "rrf", "--hybrid-weight", "0.3"):
            "--hybrid-weight",
        ("evaluate", "--model", model, "--data", str(data), "--config", str(config)): "--hybrid-weight",
        ("search", "--index", str(index), "--queries", str(emb), "--output", str(tmp_path / "r.trec"),
         "--query-max-length", "4"): "--query-max-length",
        ("search", "--index", str(index), "--queries", str(emb), "--output", str(tmp_path / "r.trec"),
         "--model", model): "--model",
        ("index", "--embeddings", str(emb), "--output", str(index), "--k1", "1.5"): "--k1",
        ("encode", "--model", model, "--corpus", str(config), "--output", str(emb), "--query-prefix", "q: "):
            "--query-prefix",
    }
    for args, named in cases.items():
        assert main(list(args)) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"retromae: error: {named}: acts only"), (args, err)
    import retromae

    with pytest.raises(ConfigError, match="^--hybrid-weight: acts only with --hybrid"):
        retromae.EvaluateConfig(model=[model], data=[data], hybrid_weight=0.2)
