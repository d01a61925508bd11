"""Plain masked language modelling: the encoder's MLM loss alone (the BERT baseline of the papers)."""

from __future__ import annotations

import torch

from retromae.objectives.base import PretrainingObjective


class MaskedLanguageModeling(PretrainingObjective):
    """BERT's MLM at `encoder_mask_ratio` with 80/10/10 corruption; the vocabulary projection runs only where masked."""

    title = "MLM"

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        _, loss = self.encode_masked(batch, generator)
        return {"loss": loss, "encoder_mlm": loss.detach()}
