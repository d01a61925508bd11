"""The texts behind an index's ids: the corpus file that an embeddings folder (encode.json) or an index folder
(index.json) records, found again from any working folder.

Owns reading a recorded corpus (`{"path": absolute path, "fingerprint": size and sha256}`), the messages when it
moved or changed (naming the record it came from and the option that overrides it), and the documents' texts by
id, checked to be the texts encoded (`retrieval.lineage`). Does not own the record's writing (`retrieval.encode`,
`retrieval.index`), the checks against records (`retrieval.lineage`) nor the corpus format (`data.retrieval_sets`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retromae.retrieval.lineage import check_texts, file_change, recorded_path
from retromae.runtime.console import notice
from retromae.runtime.errors import DataError
from retromae.runtime.lines import quoted
from retromae.runtime.options import ConfigError


def corpus_path(record: Any, where: str, override: str) -> Path:
    """The recorded corpus file, unchanged: ConfigError or DataError naming `where` it was recorded and the option
    `override` that names another."""
    problem = file_change(record)
    if problem == "is not recorded":
        raise ConfigError(f"{override}: {where} records no corpus file; name the corpus with {override}")
    if problem is not None:
        raise DataError(f"the corpus recorded in {where} {problem}; {override} FILE names the corpus to use")
    return recorded_path(record)


def document_texts(ids: Sequence[str], record: Any, where: str, override: str, given: str | Path | None = None,
                   encoding: dict[str, Any] | None = None) -> list[str] | None:
    """The text of each id (title and text joined), from `given` or the recorded corpus, checked to be the texts
    `encoding` (the record of the encoding, index.json's "encoder") says were encoded; None, after one warning on
    standard error, when the recorded corpus moved or changed (callers then show ids and scores only)."""
    from retromae.data.retrieval_sets import load_corpus  # numpy: only when texts are shown

    if given is None:
        problem = file_change(record)
        if problem is not None:
            notice(f"retromae: warning: the corpus recorded in {where} {problem}; showing ids and scores only "
                   f"({override} FILE names the corpus)")
            return None
    path = Path(given) if given is not None else recorded_path(record)
    passages = load_corpus(path)
    missing = next((doc_id for doc_id in ids if doc_id not in passages), None)
    if missing is not None:
        raise DataError(f"{path}: has no document {quoted(missing)} of the index; {override} names the indexed corpus")
    texts = [passages[doc_id].joined() for doc_id in ids]
    check_texts(ids, texts, encoding or {}, path, where, f"{override} names the corpus the index was encoded from")
    return texts
