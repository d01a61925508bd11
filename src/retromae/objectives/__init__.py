"""Pre-training objectives, one module each, and the registry that builds them by name.

Every objective is a `PretrainingObjective`: forward(batch, generator) returns a dict of named losses whose
"loss" entry is optimised; the training loop logs every entry. Each class builds itself from a pre-training
config with `from_config` and checks its options with `check_config`; adding an objective means adding its
module and one registry entry.
"""

from __future__ import annotations

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.cocondenser import CoCondenser
from retromae.objectives.condenser import Condenser
from retromae.objectives.contrastive import Contrastive
from retromae.objectives.contriever import Contriever
from retromae.objectives.dupmae import DupMAE
from retromae.objectives.mlm import MaskedLanguageModeling
from retromae.objectives.retromae import RetroMAE
from retromae.objectives.retromae_contrastive import RetroMAEContrastive
from retromae.objectives.seed import SEEDEncoder
from retromae.objectives.simcse import SimCSE

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
}


def build_objective(name: str, encoder: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    config) -> PretrainingObjective:
    """The objective `name` around `encoder`, configured from a pre-training config."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; choose from {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name].from_config(encoder, MaskingSettings.create(tokenizer, config), config)
