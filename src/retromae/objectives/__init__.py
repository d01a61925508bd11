"""Pre-training objectives, one module each, and the registry that builds them by name.

Every objective is a `PretrainingObjective`: forward(batch, generator) returns a dict of named losses whose
"loss" entry is optimised; the training loop logs every entry. Each class builds itself from a pre-training
config with `from_config` and checks its options with `check_config`; adding an objective means adding its
module and one registry entry. `create_objective` builds one for a loop of one's own, without a config.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.cocondenser import CoCondenser
from retromae.objectives.condenser import Condenser
from retromae.objectives.contrastive import Contrastive
from retromae.objectives.contriever import Contriever
from retromae.objectives.cropping import Cropping
from retromae.objectives.dupmae import DupMAE
from retromae.objectives.mlm import MaskedLanguageModeling
from retromae.objectives.retromae import RetroMAE
from retromae.objectives.retromae_contrastive import RetroMAEContrastive
from retromae.objectives.seed import SEEDEncoder
from retromae.objectives.simcse import SimCSE
from retromae.objectives.tsdae import TSDAE

OBJECTIVES: dict[str, type[PretrainingObjective]] = {
    "retromae": RetroMAE,
    "mlm": MaskedLanguageModeling,
    "seed": SEEDEncoder,
    "contrastive": Contrastive,
    "retromae+contrastive": RetroMAEContrastive,
    "dupmae": DupMAE,
    "condenser": Condenser,
    "cocondenser": CoCondenser,
    "contriever": Contriever,
    "simcse": SimCSE,
    "tsdae": TSDAE,
    "cropping": Cropping,
}


def build_objective(name: str, encoder: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    config) -> PretrainingObjective:
    """The objective `name` around `encoder`, configured from a pre-training config."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; choose from {', '.join(OBJECTIVES)}")
    objective = OBJECTIVES[name].from_config(encoder, MaskingSettings.create(tokenizer, config), config)
    objective.use_vocabulary_loss(getattr(config, "vocabulary_loss", "auto"))  # configs written before the option
    return objective


def create_objective(name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                     **options: Any) -> PretrainingObjective:
    """The objective `name` around `model` (a masked LM), with `retromae pretrain`'s defaults for every option not
    given (e.g. `decoding="basic"`, `encoder_mask_ratio=0.15`); the options are checked as the command checks them."""
    from retromae.pretraining.config import PretrainConfig

    defaults = {field.name: field.default for field in dataclasses.fields(PretrainConfig)
                if field.default is not dataclasses.MISSING}
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TypeError(f"create_objective() got unknown option(s) {', '.join(unknown)}")
    config = types.SimpleNamespace(**{**defaults, **options, "objective": name})
    if name in OBJECTIVES:
        OBJECTIVES[name].check_config(config)
    return build_objective(name, model, tokenizer, config)
