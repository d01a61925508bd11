"""The texts behind an index's ids: the corpus file that an embeddings folder (encode.json) or an index folder
(index.json) records, found again from any working folder.

Owns reading a recorded corpus (`{"path": absolute path, "fingerprint": size and sha256}`), the messages when it
moved or changed (naming the record it came from and the option that overrides it), and the documents' texts by
id. Does not own the record's writing (`retrieval.encode`, `commands.index`) nor the corpus format
(`data.retrieval_sets`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import input_fingerprint


def recorded_path(record: Any) -> Path | None:
    """The path a corpus record names, or None when there is no record."""
    path = record.get("path") if isinstance(record, dict) else None
    return Path(path) if isinstance(path, str) and path else None


def change(record: Any) -> str | None:
    """Why the recorded corpus cannot be read as it was (missing, changed since), or None when it can."""
    path = recorded_path(record)
    if path is None:
        return "is not recorded"
    if not path.exists():
        return f"({path}) is not there any more (moved or deleted)"
    if input_fingerprint(path) != record.get("fingerprint"):
        return f"({path}) changed since it was recorded"
    return None


def corpus_path(record: Any, where: str, override: str) -> Path:
    """The recorded corpus file, unchanged: ConfigError or DataError naming `where` it was recorded and the option
    `override` that names another."""
    problem = change(record)
    if problem == "is not recorded":
        raise ConfigError(f"{override}: {where} records no corpus file; name the corpus with {override}")
    if problem is not None:
        raise DataError(f"the corpus recorded in {where} {problem}; {override} FILE names the corpus to use")
    return recorded_path(record)


def document_texts(ids: Sequence[str], record: Any, where: str, override: str,
                   given: str | Path | None = None) -> list[str] | None:
    """The text of each id (title and text joined), from `given` or the recorded corpus; None, after one warning
    on standard error, when the recorded corpus moved or changed (callers then show ids and scores only)."""
    from retromae.data.retrieval_sets import load_corpus  # numpy: only when texts are shown

    if given is None:
        problem = change(record)
        if problem is not None:
            print(f"retromae: warning: the corpus recorded in {where} {problem}; showing ids and scores only "
                  f"({override} FILE names the corpus)", file=sys.stderr)
            return None
    path = Path(given) if given is not None else recorded_path(record)
    passages = load_corpus(path)
    missing = next((doc_id for doc_id in ids if doc_id not in passages), None)
    if missing is not None:
        raise DataError(f"{path}: has no document {missing!r} of the index; {override} names the indexed corpus")
    return [passages[doc_id].joined() for doc_id in ids]
