"""Profile: where the CPU time of `retromae pretrain` goes, by function, at MiniLM B16 L128.

Runs `pretrain(config)` (all-MiniLM-L6-v2, RetroMAE enhanced, `--max-steps`, no checkpoints) under `cProfile` with
the process's CPU time as its clock, so that other jobs on a shared machine do not inflate the figures, and prints
the functions by cumulative time: `Trainer._optimizer_step` and inside it the forward, backward, optimiser step and
clipping.

    PYTHONPATH=src python benchmarks/profile_pretrain.py --corpus CORPUS.jsonl [--steps 8] [--objective retromae]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time

from common import machine_header, minilm_path

from retromae.pretraining.config import PretrainConfig
from retromae.pretraining.run import pretrain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="pre-training corpus (e.g. ../shared/data/pretrain/...)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--objective", default="retromae")
    parser.add_argument("--lines", type=int, default=40, help="functions to print")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        config = PretrainConfig(model=str(minilm_path()), corpus=[args.corpus], output=f"{folder}/run",
                                objective=args.objective, max_steps=args.steps, batch_size=16, max_length=128,
                                save_every=0, cache_dir=f"{folder}/cache", log_every=args.steps)
        profile = cProfile.Profile(time.process_time)
        profile.enable()
        pretrain(config)
        profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.lines)


if __name__ == "__main__":
    main()
