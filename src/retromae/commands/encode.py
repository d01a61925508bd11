"""`retromae encode`: a corpus or query file → an embeddings folder (float32 .npy + ids.txt), resumable.

Thin: parse → `EncodeConfig` (`retromae.retrieval.config`) → `retromae.retrieval.run.encode`
(`retrieval.encode.encode_to_dir`). Several GPUs or processes share the work when started with
`accelerate launch -m retromae encode ...`.
"""

from __future__ import annotations

import argparse
import time

from retromae.preflight import configured
from retromae.retrieval.config import EncodeConfig
from retromae.runtime.options import add_config_arguments

PROCESSES = "several"  # splits its work over a multi-process launch (retromae.runtime.processes)
HELP = "encode a corpus or queries file into float32 vectors (embeddings.npy + ids.txt), resumable by shard"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, EncodeConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(EncodeConfig, args)  # first: a wrong option, file or hub name answered before torch
    # torch: only when the command runs, so --help stays instant
    from retromae.retrieval.encode import INFO_FILE
    from retromae.retrieval.run import encode
    from retromae.runtime.console import format_seconds, given, out
    from retromae.runtime.lines import read_json_file
    from retromae.runtime.processes import is_main_process

    started = time.perf_counter()
    folder = encode(config)
    if is_main_process():
        info = read_json_file(folder / INFO_FILE)
        out(f"encoded {info['count']:,} texts in {format_seconds(time.perf_counter() - started)} into {given(folder)} "
            f"({info['dim']} dimensions, at most {info['max_length']} tokens, pooling {info['pooling']}, "
            f"normalize {info['normalize']})")
    return 0
