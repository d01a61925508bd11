"""Building an objective by name: from a run's flat config (`build_objective`) or from keyword options
(`create_objective`, for a loop of one's own).

Owns turning flat values into the objective's typed options (`ObjectiveOptions.from_values`) and the masking
settings, and handing both to the class's `from_config`. Does not own the table of names (`retromae.objectives`)
nor any objective.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from retromae.objectives import OBJECTIVES
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.options import RUN_DEFAULTS


def objective_class(name: str) -> type[PretrainingObjective]:
    """The class of objective `name`; ValueError naming the choices for an unknown name."""
    try:
        return OBJECTIVES[name]
    except KeyError as error:
        raise ValueError(error.args[0]) from None


def build_objective(name: str, encoder: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    config: Any) -> PretrainingObjective:
    """The objective `name` around `encoder`, its options read from a run's flat config (a `PretrainConfig`, or any
    object with the options as attributes)."""
    cls = objective_class(name)
    options = cls.options.from_values(config)
    objective = cls.from_config(encoder, MaskingSettings.create(tokenizer, config), options)
    objective.use_vocabulary_loss(getattr(config, "vocabulary_loss", "auto"))  # configs written before the option
    return objective


def create_objective(name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                     **options: Any) -> PretrainingObjective:
    """The objective `name` around `model` (a masked LM), with `retromae pretrain`'s defaults for every option not
    given (e.g. `decoding="basic"`, `encoder_mask_ratio=0.15`); the options are checked as the command checks them."""
    cls = objective_class(name)
    known = set(RUN_DEFAULTS) | {field.name for field in dataclasses.fields(cls.options)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"create_objective() got unknown option(s) {', '.join(unknown)}")
    typed = cls.options(**{key: value for key, value in options.items() if key not in RUN_DEFAULTS})
    typed.check()
    run = {**RUN_DEFAULTS, **{key: value for key, value in options.items() if key in RUN_DEFAULTS}}
    masking = MaskingSettings(tokenizer.mask_token_id, len(tokenizer), run["encoder_mask_ratio"],
                              run["whole_word_mask"])
    objective = cls.from_config(model, masking, typed)
    objective.use_vocabulary_loss(run["vocabulary_loss"])
    return objective
