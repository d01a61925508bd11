"""Launched by tests/test_gpu.py under `accelerate launch` (FSDP, DeepSpeed): `retromae` with every process killed
(a KeyboardInterrupt) right after it writes the checkpoint of step N, as a job stopped by its scheduler would be.

    accelerate launch --config_file CONFIG tests/launch_killed.py N pretrain --output RUN ...

Exits with the CLI's code: 130 once killed.
"""

from __future__ import annotations

import sys

from retromae.cli import main
from retromae.training.loop import Trainer


def kill_after(step: int) -> None:
    save = Trainer.save_checkpoint

    def save_then_die(self: Trainer) -> None:
        save(self)
        if self.state.step == step:
            raise KeyboardInterrupt(f"killed after the step-{step} checkpoint")

    Trainer.save_checkpoint = save_then_die


if __name__ == "__main__":
    kill_after(int(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
