"""Round nine: `init-model`'s parameter count is what each family's config builds (no position table for ModernBERT
and DeBERTa-v3), so its memory check weighs the model it is about to allocate."""

from __future__ import annotations

import pytest

from retromae.backbones.families import architecture_names
from retromae.pretraining import config as config_module
from retromae.pretraining.config import check_model_fits, model_parameters
from retromae.runtime.options import ConfigError

SIZES = [(300, 64, 2, 96), (1000, 128, 1, 512)]  # (vocabulary, hidden size, layers, positions)


@pytest.mark.parametrize("architecture", architecture_names())
@pytest.mark.parametrize(("vocab", "hidden", "layers", "positions"), SIZES)
def test_the_estimate_is_the_count_of_the_model_built(architecture, vocab, hidden, layers, positions):
    import torch
    from transformers import AutoModelForMaskedLM

    from retromae.backbones.registry import architecture_adapter

    config = architecture_adapter(architecture).scratch_config(
        architecture, vocab, {"pad": 1, "cls": 0, "sep": 2}, hidden_size=hidden, layers=layers,
        max_positions=positions)
    with torch.device("meta"):  # shapes only: nothing allocated nor initialised
        built = sum(parameter.numel() for parameter in AutoModelForMaskedLM.from_config(config).parameters())
    estimate = model_parameters(architecture, vocab, hidden, layers, positions)
    assert abs(estimate - built) <= 0.01 * built, (estimate, built)


@pytest.mark.parametrize("architecture", ["modernbert", "deberta-v2"])
def test_a_family_without_a_position_table_is_not_refused_for_one(monkeypatch, architecture):
    """At 8192 positions (ModernBERT's default) a table of 64 wide would be 524,288 parameters; memory for the model
    alone is enough, and a byte less is refused."""
    count = model_parameters(architecture, 1000, 64, 1, 8192)
    assert count == model_parameters(architecture, 1000, 64, 1, 8)
    monkeypatch.setattr(config_module, "available_memory", lambda: 4 * count)
    check_model_fits(architecture, 1000, 64, 1, 8192)
    monkeypatch.setattr(config_module, "available_memory", lambda: 4 * count - 1)
    with pytest.raises(ConfigError, match=rf"^--hidden-size, --layers, --max-positions: a {architecture} model .* "
                                          rf"about {count:,} parameters"):
        check_model_fits(architecture, 1000, 64, 1, 8192)
