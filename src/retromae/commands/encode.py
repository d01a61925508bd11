"""`retromae encode`: a corpus or query file → an embeddings folder (float32 .npy + ids.txt), resumable.

Thin: parse → `EncodeConfig` (`retromae.retrieval.config`) → `retromae.retrieval.run.encode`
(`retrieval.encode.encode_to_dir`). Several GPUs or processes share the work when started with
`accelerate launch -m retromae encode ...`.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from retromae.preflight import configured
from retromae.retrieval.config import EncodeConfig
from retromae.runtime.options import add_config_arguments

if TYPE_CHECKING:
    from retromae.retrieval.encode import Encoded

PROCESSES = "several"  # splits its work over a multi-process launch (retromae.runtime.processes)
HELP = "encode a corpus or queries file into float32 vectors (embeddings.npy + ids.txt), resumable by shard"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, EncodeConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(EncodeConfig, args)  # first: a wrong option, file or hub name answered before torch
    # torch: only when the command runs, so --help stays instant
    from retromae.retrieval.run import encode
    from retromae.runtime.processes import is_main_process

    started = time.perf_counter()
    done = encode(config)
    if is_main_process():
        summary(done, time.perf_counter() - started)
    return 0


def summary(done: Encoded, seconds: float) -> None:
    """The command's line: the texts it encoded now (those an earlier run had encoded, when there are, apart) and how
    its encode.json says the vectors were made."""
    # torch (through retrieval.encode): only when the command runs, so --help stays instant
    from retromae.retrieval.encode import INFO_FILE
    from retromae.runtime.console import format_seconds, given, out
    from retromae.runtime.lines import read_json_file

    info = read_json_file(done.folder / INFO_FILE)
    dtype = info.get("dtype", "float32")  # a record made before the precision was recorded: float32's
    made = (f"{info['dim']} dimensions, at most {info['max_length']} tokens, pooling {info['pooling']}, normalize "
            f"{info['normalize']}, dtype {dtype}")
    if done.earlier == done.count > 0:
        out(f"nothing to encode: {given(done.folder)} holds the vectors of these {done.count:,} texts from an earlier "
            f"run ({made})")
    elif done.earlier:
        out(f"encoded {done.count - done.earlier:,} of {done.count:,} texts in {format_seconds(seconds)} into "
            f"{given(done.folder)} ({done.earlier:,} read from an earlier run's finished shards; {made})")
    else:
        out(f"encoded {done.count:,} texts in {format_seconds(seconds)} into {given(done.folder)} ({made})")
