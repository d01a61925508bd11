import argparse
import dataclasses
import json

import pytest

from retromae.runtime.options import ConfigError, add_config_arguments, build_config, option, require


@dataclasses.dataclass
class Example:
    model: str = option(help="model name")
    steps: int = option(10, "number of steps")
    ratio: float = option(0.3, "a ratio")
    files: list[str] = option(["a"], "input files")
    flag: bool = option(False, "a switch")
    mode: str = option("x", "a mode", choices=("x", "y"))

    def __post_init__(self):
        require(0 <= self.ratio <= 1, "ratio", "must lie in [0, 1]")


def parse(argv):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Example)
    return parser.parse_args(argv)


def test_flags_override_config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: m\nsteps: 5\nencoder-free: 1\n".replace("encoder-free: 1\n", "ratio: 0.5\n"))
    config = build_config(Example, parse(["--config", str(path), "--steps", "7", "--files", "p", "q", "--flag"]))
    assert (config.model, config.steps, config.ratio, config.files, config.flag) == ("m", 7, 0.5, ["p", "q"], True)


def test_json_file_and_defaults(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model": "m"}))
    config = build_config(Example, parse(["--config", str(path)]))
    assert config.steps == 10 and config.files == ["a"] and config.mode == "x"


def test_missing_required_and_unknown_and_invalid(tmp_path):
    with pytest.raises(ConfigError, match="--model"):
        build_config(Example, parse([]))
    path = tmp_path / "c.yaml"
    path.write_text("model: m\nbogus: 1\n")
    with pytest.raises(ConfigError, match="bogus"):
        build_config(Example, parse(["--config", str(path)]))
    with pytest.raises(ConfigError, match="--ratio"):
        build_config(Example, parse(["--model", "m", "--ratio", "2"]))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="bad.json"):
        build_config(Example, parse(["--config", str(bad)]))
