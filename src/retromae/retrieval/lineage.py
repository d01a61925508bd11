"""What is derived agrees with what it came from: each check of an artefact against a fingerprint its record holds.

The records and what they fingerprint: an embeddings folder's encode.json (copied into index.json under "encoder")
holds the model's files (`model_fingerprint`), the ids and texts encoded (`fingerprint`) and the input file
(`source`: its path and file fingerprint); index.json holds the corpus its texts come from (`corpus`, likewise).
Whatever a command derives from, or shows beside, such a record is checked here against it:

- `check_texts`: texts read for the ids of vectors, against the ids and texts encoded: the BM25 side of `index
  --hybrid` (from `--corpus` or the recorded corpus), the documents `search --query` shows (`--corpus`, or the
  recorded corpus). (The query texts BM25 searches for an embeddings folder of queries come from the file its
  encode.json records, unchanged by `file_change`.) Before, `index --hybrid --corpus other.jsonl` (same ids,
  other texts) built a BM25 side over texts the vectors never saw;
- `check_model`: the query encoder against the model the documents were encoded with (`same_model`: an untied
  fine-tune's query tower is the model of the documents its passage tower encoded);
- `check_prompts`: the query prompt a model's folder names, put by default, against the documents' prefix: refused
  where they were encoded without the passage prompt (an index encoded before the prompts were put by default);
- `check_side`: the side an embeddings folder holds (encode.json's `side`: queries or documents) against the side
  its reader takes: `index --embeddings` documents, every reader of query vectors queries. Before, an index was
  built of query vectors, and recall measured on the documents themselves;
- `check_alike`: what makes the query vectors (their record, or `search`'s --pooling and --normalize:
  `check_query_options`) against the documents' encoding (model, pooling, normalisation, width). Before, `search
  --query --pooling mean` searched an index of cls vectors;
- `check_query_vectors`: the one check of query vectors against the documents' (`search --queries`, `index
  --recall-queries`): their side, `check_alike`, the prefixes each side was encoded with against the prompts the
  model's folder names (refused where one side has its prompt and the other not), and `check_inference`; those of
  an untied fine-tune's query tower are taken against its passage tower's documents;
- `check_inference`: what encodes the queries (backend and quantization, `retromae.models.backends`) against what
  encoded the documents: refused where the two differ in quantization or are int8 of different backends (their
  vectors differ by more than the float32 backends', which agree to about 1e-6: docs/performance.md), said in a
  note where only the float32 backend differs;
- `file_change`: a recorded file (a corpus) against its file fingerprint: moved, deleted or changed since.

A record written before a fingerprint was kept has none, and is read as it is. The files of one folder are checked
against its own record where the folder is read (`index.check_generation`, `encode.load_embeddings`; the BM25 side's
ids in `bm25.BM25.load`). Does not own writing the records (`retrieval.encode`, `retrieval.index`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retromae.models.encoder_config import BACKENDS, QUANTIZATIONS, backend_of
from retromae.models.model_source import tower_folder, tower_side
from retromae.retrieval.vector_files import SIDES
from retromae.runtime.console import notice
from retromae.runtime.errors import DataError
from retromae.runtime.lines import quoted
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import input_fingerprint

SIDE_TEXTS = dict(zip(SIDES, ("queries", "documents"), strict=True))  # encode.json's side: what its texts were
SIDE_OPTIONS = dict(zip(SIDES, ("--queries", "--corpus"), strict=True))  # the option of `encode` that reads them


def texts_fingerprint(ids: Sequence[str], texts: Sequence[str]) -> str:
    """A hash of ids and texts in order (encode.json's `fingerprint`), so that texts are known to be those encoded."""
    digest = hashlib.sha1()
    for doc_id, text in zip(ids, texts, strict=True):
        digest.update(doc_id.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0")
    return digest.hexdigest()


def check_texts(ids: Sequence[str], texts: Sequence[str], record: dict[str, Any], source: str | Path, where: str,
                remedy: str) -> None:
    """DataError when `texts` (of `ids`, in the order encoded, read from `source`) are not the texts the record at
    `where` says were encoded; `remedy` says what to give instead."""
    recorded = record.get("fingerprint")
    if isinstance(recorded, str) and texts_fingerprint(ids, texts) != recorded:
        raise DataError(f"{source}: its texts of the {len(ids):,} encoded ids are not the texts that were encoded "
                        f"(the fingerprint of ids and texts recorded in {where} differs); {remedy}")


def same_model(model: str, fingerprint: str) -> bool:
    """Whether `model` is the model whose files `fingerprint` fingerprinted, or the query tower (or run folder) of
    the untied fine-tune whose passage tower's they were (`model_source.tower_folder`): the two towers are one model,
    the query tower encoding the queries of the documents its twin encoded."""
    if input_fingerprint(model) == fingerprint:
        return True
    passage = tower_folder(model, "passage")
    return passage is not None and input_fingerprint(passage) == fingerprint


def check_model(model: str, record: dict[str, Any], where: Path, given: bool) -> None:
    """ConfigError when `model` is not the model whose files the record at `where` fingerprinted (`same_model`: an
    untied fine-tune's query tower is its passage tower's model); `given`: named by --model (else the record's own
    path)."""
    recorded = record.get("model_fingerprint")
    if recorded and not same_model(model, recorded):
        said = "--model" if given else f"the model recorded in {where}"
        raise ConfigError(f"{said} ({model}) is not the model the index was encoded with (its files differ from "
                          f"those fingerprinted in {where}); --model names the model to use")


def check_prompts(prompts: dict[str, str], given: str | None, record: dict[str, Any], where: Path, model: str) -> None:
    """ConfigError where the queries would get the model's prompt by default (`given` None, its folder naming
    prompts by side: `models.encoder.named_prompts`) but the documents were not encoded with the model's passage
    prompt (their prefix, as the record at `where` holds it, is another): the two sides would be encoded unalike, as
    an index encoded before the prompts were put by default (with no prefix) would be searched."""
    documents = record.get("prefix")
    if given is not None or not prompts or not isinstance(documents, str) or documents == prompts.get("passage", ""):
        return
    put = " and ".join(f"{quoted(prompt)} before a {side}" for side, prompt in sorted(prompts.items()))
    raise ConfigError(f"--query-prefix: the documents were encoded with the prefix {quoted(documents)} ({where} "
                      f"records it), and {model} puts {put} by default: give --query-prefix to say what their "
                      "queries need ('' for none), or encode the documents again with the model's passage prompt")


def check_side(record: dict[str, Any], side: str, folder: Path, flag: str) -> None:
    """ConfigError naming `flag` where the record of the embeddings folder `folder` (encode.json) says it holds the
    vectors of the other side than `side` ("query": `encode --queries`, "passage": `encode --corpus`); a record
    without a side (written before sides were recorded) is read as it is."""
    held = record.get("side")
    if held is None or held == side:
        return
    raise ConfigError(f"{flag}: {folder} holds the vectors of {SIDE_TEXTS[held]} ({folder / 'encode.json'} records "
                      f"side {quoted(held)}: `retromae encode {SIDE_OPTIONS[held]}`), not of {SIDE_TEXTS[side]}; "
                      f"encode the {SIDE_TEXTS[side]} with `retromae encode {SIDE_OPTIONS[side]}`")


def _check_vector_prompts(query_info: dict[str, Any], recorded: dict[str, Any], queries: Path, index: Path,
                          flag: str) -> None:
    """ConfigError naming `flag` where query vectors (encode.json of `queries`) and the documents of `index` (their
    record `recorded`) were encoded with prefixes of which one side is the prompt the model's folder names for it
    (`models.encoder.folder_prompts`, of the documents' recorded model) and the other not: a query encoded with the
    query prompt against documents encoded without the passage prompt, or documents encoded with the passage prompt
    against queries encoded without the query prompt (encoded before the prompts were put by default)."""
    from retromae.models.encoder import folder_prompts  # torch: only where vectors are compared

    query, documents = query_info.get("prefix"), recorded.get("prefix")
    prompts = folder_prompts(recorded.get("model"))
    if not (prompts and isinstance(query, str) and isinstance(documents, str)):
        return
    asked, offered = prompts.get("query", ""), prompts.get("passage", "")
    if (asked and query == asked and documents != offered) or (offered and documents == offered and query != asked):
        put = " and ".join(f"{quoted(prompt)} before a {side}" for side, prompt in sorted(prompts.items()))
        raise ConfigError(f"{flag}: {queries} was encoded with the prefix {quoted(query)} and the documents of "
                          f"{index} with {quoted(documents)} (their records say so), and {recorded.get('model')} "
                          f"puts {put}: one side has the model's prompt and the other not; encode the queries "
                          "again as the documents were (`retromae encode --queries` puts the model's query prompt)")


def check_alike(made: dict[str, Any], recorded: dict[str, Any], said: str, index: Path, remedy: str) -> None:
    """ConfigError when what makes the query vectors (`made`: their encode.json, or the options given) and the
    documents' record `recorded` (of `index`) both hold a field that makes vectors, and differ in it: the model (by
    fingerprint where both hold one, else by path; an untied fine-tune's query tower is its passage tower's model),
    pooling, normalisation, width. `said` begins the line ("--queries:
    FOLDER was", "--pooling: the queries would be"); `remedy` ends it."""
    by_content = recorded.get("model_fingerprint") and made.get("model_fingerprint")
    keys = ("model_fingerprint" if by_content else "model", "pooling", "normalize", "dim")
    differ = [key for key in keys if key in recorded and key in made and made[key] != recorded[key]
              and not (key == "model_fingerprint" and _query_tower_of(made, recorded[key]))]
    if differ:
        shown = ", ".join(f"{key} {quoted(made[key])} against {quoted(recorded[key])}" for key in differ)
        raise ConfigError(f"{said} encoded otherwise than the documents of {index} ({shown}); {remedy}")


def check_query_options(given: dict[str, Any], recorded: dict[str, Any], index: Path) -> None:
    """ConfigError naming the option where `search` (or a `Searcher`) is given an option that makes the query vectors
    (`given`: pooling, normalize; None where not given, the record's taken) otherwise than the documents of `index`
    were encoded (`recorded`, its index.json's encoder): `check_alike`, as for query vectors."""
    for key, value in given.items():
        if value is not None:
            flag = f"--{'' if value or key != 'normalize' else 'no-'}{key}"
            check_alike({key: value}, recorded, f"{flag}: the queries would be", index,
                        f"drop {flag} to encode them as {index / 'index.json'} records")


def check_query_vectors(query_info: dict[str, Any], recorded: dict[str, Any], queries: Path, index: Path,
                        flag: str = "--queries") -> None:
    """ConfigError naming `flag` unless the vectors of `queries` (its encode.json `query_info`) may be searched
    against the documents of `index` (an index or embeddings folder) as `recorded`: the one check of every reader of
    query vectors (`search --queries`, `index --recall-queries`). They hold queries (`check_side`), encoded as the
    documents were (`check_alike`: model, pooling, normalisation, width), with the model's prompts on both sides or
    on neither (`_check_vector_prompts`), by a backend and quantization that may search them (`check_inference`)."""
    check_side(query_info, "query", queries, flag)
    check_alike(query_info, recorded, f"{flag}: {queries} was", index,
                "encode the queries with the index's model, or give a queries file")
    _check_vector_prompts(query_info, recorded, queries, index, flag)
    record = index / ("index.json" if (index / "index.json").is_file() else "encode.json")
    check_inference(recorded_inference(query_info, queries / "encode.json"),
                    recorded_inference(recorded, record), f"{flag}: {queries} was", index)


def _query_tower_of(query_info: dict[str, Any], fingerprint: str) -> bool:
    """Whether query vectors (their encode.json `query_info`) were encoded by the query tower of the untied
    fine-tune whose passage tower's files `fingerprint` fingerprinted (`same_model`): the folder they record is such a
    tower (`model_source.tower_side`) and holds the files they were encoded with."""
    model = query_info.get("model")
    return isinstance(model, str) and bool(model) and tower_side(model) == "query" and \
        input_fingerprint(model) == query_info.get("model_fingerprint") and same_model(model, fingerprint)


def recorded_inference(record: dict[str, Any], where: Path) -> tuple[str, str]:
    """The backend and quantization a record (encode.json, index.json's encoder) says encoded its vectors; a record
    without them is torch's float32 (made before the backends); ConfigError naming `where` for another value."""
    backend, quantize = backend_of(record.get("backend"), record.get("quantize"))
    if backend not in BACKENDS or quantize not in QUANTIZATIONS:
        raise ConfigError(f"{where}: records backend {quoted(backend)} and quantize {quoted(quantize)}; a record holds "
                          f"one of {', '.join(BACKENDS)} and one of {', '.join(QUANTIZATIONS)}")
    return backend, quantize


def _named(inference: tuple[str, str]) -> str:
    return f"--backend {inference[0]} --quantize {inference[1]}"


def check_inference(queries: tuple[str, str], documents: tuple[str, str], said: str, index: Path) -> None:
    """ConfigError when the queries' (backend, quantize) may not search documents encoded with `documents`'s: another
    quantization, or int8 of another backend; float32 of another backend is searched, with a note. `said` begins
    the line ("--backend", "--queries: FOLDER was")."""
    if queries == documents:
        return
    line = f"{said} encoded with {_named(queries)}, the documents of {index} with {_named(documents)}"
    if queries[1] == documents[1] == "none":
        notice(f"retromae: note: {line} (float32 both: their vectors agree to about 1e-6, docs/performance.md)")
        return
    raise ConfigError(f"{line}; encode both sides alike (drop --backend and --quantize to use the documents')")


def recorded_path(record: Any) -> Path | None:
    """The path a file record (`{"path": ..., "fingerprint": ...}`) names, or None when there is no record."""
    path = record.get("path") if isinstance(record, dict) else None
    return Path(path) if isinstance(path, str) and path else None


def file_change(record: Any) -> str | None:
    """Why the recorded file cannot be read as it was (not recorded, missing, changed since), or None when it can."""
    path = recorded_path(record)
    if path is None:
        return "is not recorded"
    if not path.exists():
        return f"({path}) is not there any more (moved or deleted)"
    if input_fingerprint(path) != record.get("fingerprint"):
        return f"({path}) changed since it was recorded"
    return None
