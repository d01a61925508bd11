"""A pre-training run's objective in words, from the config the run saved: for model cards and report tables.

Owns `describe_pretraining` ("retromae enhanced, enc mask 0.3, dec mask 0.5, 1 dec layer, 120 steps"), which asks
the objective's class what it masks and its options class what it reads. Imports no torch until an objective's class
is asked for. Does not own the objectives or the cards and reports that show the words.
"""

from __future__ import annotations

from retromae.objectives import OBJECTIVES
from retromae.objectives.options import DecoderOptions


def describe_pretraining(config: dict) -> str:
    """A short description of a pre-training run's method, from its saved config (its objective's class says what
    it masks and whether it has a decoder)."""
    name = config["objective"]
    objective = OBJECTIVES[name]
    options = objective.options.from_values(config)
    parts = [f"{name} {options.variant}" if options.variant else name]
    if "encoder" in objective.masks:
        parts.append(f"enc mask {config['encoder_mask_ratio']:g}")
    if "decoder" in objective.masks:
        parts.append(f"dec mask {options.decoder_mask_ratio:g}")
    layers = options.decoder_layers if isinstance(options, DecoderOptions) else None
    if layers:
        parts.append(f"{layers} dec layer{'s' if layers > 1 else ''}")
    parts.append(f"{config['max_steps']} steps")
    if config.get("freeze_encoder_steps"):
        parts.append(f"heads alone for the first {config['freeze_encoder_steps']}")
    if config.get("head_learning_rate"):
        parts.append(f"head lr {config['head_learning_rate']:g}")
    return ", ".join(parts)
