"""What a command holds out is never what it trains on: the one check, for every command that has both.

Owns `HeldOut` (a command's declaration, on its config class as `HELD_OUT`: which option names the held-out queries
and which the queries it trains on, each with its split) and `check_held_out(config)`, run for every declaration
before any model is loaded: by `retromae.preflight.configured` for the command line and config files, and again by
the run itself (`adapt`, `quickstart`) for the Python API. Both sets from one folder (two splits of one collection):
a held-out query is trained on when its id is a training query's, since the folder's ids say which queries are the
same (texts may repeat with other answers: 5 of the standard-library set's 659 test queries share a train query's
text, each with its own document). From two sources (two folders, or a training file, which has no id space): when
its text is a training query's, case and runs of spaces aside (the same question copied or re-exported under other
ids). Either is refused with one line naming both files, the count and a few ids. A held-out set is a BEIR or MS
MARCO folder (its split's judged queries); a training set is such a folder or a training file (its `query` texts).
Does not own reading those files (`data.retrieval_sets`, `data.training_groups`).

Declared today: `adapt` (`--validation`/`--validation-split`, the guard's queries and the unseen ones of
`--validation-fraction`, against `--train`/`--train-split`) and `quickstart` (`--data`'s test split, which it
reports, against its train split, which it fine-tunes on).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retromae.runtime.errors import DataError
from retromae.runtime.lines import quoted

SHOWN_IDS = 3  # ids the refusal names


@dataclass(frozen=True)
class Queries:
    """One side of a declaration: the option naming a folder (or, for training, a training file), and its split:
    the option naming it, or with `fixed` the split itself."""

    option: str
    split: str
    fixed: bool = False

    def given(self, config: Any) -> tuple[Path, str] | None:
        """(path, split) as `config` gives them; None when the option is not set."""
        path = getattr(config, self.option, None)
        if path in (None, ""):
            return None
        return Path(path), self.split if self.fixed else str(getattr(config, self.split))

    def flag(self) -> str:
        return f"--{self.option.replace('_', '-')}"


@dataclass(frozen=True)
class HeldOut:
    """A command's held-out queries and the queries it trains on; `what` names the held-out set in the refusal."""

    held_out: Queries
    training: Queries
    what: str


def _queries(path: Path, split: str) -> tuple[dict[str, str], Path]:
    """A folder's judged queries of `split`, or a training file's query texts (by line: a file has no id space),
    and the file they were read from."""
    from retromae.data.retrieval_sets import judged_queries  # numpy: only when both sets are given
    from retromae.data.training_groups import read_training_records  # numpy too (through retrieval_sets)

    if path.is_dir():
        return judged_queries(path, split)
    return {f"line {number}": record["query"] for number, record in read_training_records(path)}, path


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def trained_on(held: dict[str, str], training: dict[str, str], same_folder: bool) -> list[str]:
    """The held-out query ids that the training set holds: by id when both come from one folder, else by text."""
    if same_folder:
        return [qid for qid in held if qid in training]
    texts = {_normal(text) for text in training.values()}
    return [qid for qid, text in held.items() if _normal(text) in texts]


def check_held_out(config: Any) -> None:
    """DataError when a held-out set `config` declares (`HELD_OUT`) shares queries with what it trains on."""
    for declared in getattr(type(config), "HELD_OUT", ()):
        held_given, training_given = declared.held_out.given(config), declared.training.given(config)
        if held_given is None or training_given is None:
            continue
        held, held_file = _queries(*held_given)
        training, training_file = _queries(*training_given)
        same_folder = held_given[0].is_dir() and held_given[0].resolve() == training_given[0].resolve()
        shared = trained_on(held, training, same_folder)
        if shared:
            examples = ", ".join(map(quoted, shared[:SHOWN_IDS])) + (", ..." if len(shared) > SHOWN_IDS else "")
            how = "the same ids in one folder" if same_folder else "the same texts"
            raise DataError(f"{declared.held_out.flag()} {held_file}: {len(shared):,} of its {len(held):,} queries "
                            f"({examples}) are among those {declared.training.flag()} {training_file} trains on "
                            f"({how}); {declared.what} must never be trained on: give queries apart from the "
                            "training ones (another split or folder)")
