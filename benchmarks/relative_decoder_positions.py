"""Which position signal RetroMAE's decoder should get on a relative-position backbone (DeBERTa-v3), measured.

DeBERTa-v3 has no absolute position table to share with the decoder (`position_biased_input: false`). Three
choices, each trained from the same random DeBERTa-v3-shaped model on the same blocks with the same masks:

- rotary (the adapter's choice): parameter-free rotary positions (base 10,000) on the decoder's queries and keys;
- learned: a fresh (L, D) absolute table of the decoder's own, added to both decoder streams as BERT's table is;
- none: no position signal at all (what a decoder that only knows absolute tables falls back to).

Each trains `--steps` steps of enhanced RetroMAE (`--batch-size` blocks of `--length` tokens of `--corpus`, AdamW at
`--learning-rate` after a 10% warm-up) and reports the decoder's and the encoder's loss on held-out blocks (eval
mode, fixed masks), for each `--seeds`; the unigram entropy of the training blocks (the loss of predicting each
token by its frequency alone) is printed beside, since a decoder still on that plateau uses no positions at all.
The decoder loss is the direct measure: it is how well the decoder rebuilds each token from [CLS] and the visible
others, which it can only do position by position if it knows where each token is.

Run: PYTHONPATH=src python benchmarks/relative_decoder_positions.py [--steps 1000] [--seeds 0 1] [--length 64]
     [--batch-size 32] [--vocab-size 2000] [--learning-rate 2e-3]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from common import machine_header
from torch import nn
from transformers import AutoModelForMaskedLM

from retromae.backbones.registry import DecoderPositions, architecture_adapter
from retromae.data.corpus import iter_corpus
from retromae.objectives import build_objective
from retromae.objectives.retromae import RetroMAE
from retromae.pretraining.scratch import family_tokenizer
from retromae.runtime.console import library_output

CHOICES = ("rotary", "learned", "none")
SETTINGS = SimpleNamespace(encoder_mask_ratio=0.3, decoder_mask_ratio=0.5, whole_word_mask=False,
                           decoding="enhanced", decoder_layers=None)


class LearnedPositions(RetroMAE):
    """RetroMAE whose decoder adds a fresh learned absolute table to both streams."""

    def __init__(self, encoder, masking, length: int):
        super().__init__(encoder, masking)
        self.decoder_position_table = nn.Embedding(length, encoder.config.hidden_size)
        nn.init.normal_(self.decoder_position_table.weight, std=encoder.config.initializer_range)

    def decoder_positions(self, length: int, device: torch.device) -> DecoderPositions:
        return DecoderPositions(absolute=self.decoder_position_table(torch.arange(length, device=device)))

    def cls_and_token_stream(self, input_ids: torch.Tensor, cls_embedding: torch.Tensor) -> torch.Tensor:
        stream = super().cls_and_token_stream(input_ids, cls_embedding)  # (B, L, D)
        return stream + self.decoder_positions(input_ids.shape[1], input_ids.device).absolute[None]


class NoPositions(RetroMAE):
    """RetroMAE whose decoder gets no position signal."""

    def decoder_positions(self, length: int, device: torch.device) -> DecoderPositions:
        hidden = self.encoder.config.hidden_size
        return DecoderPositions(absolute=torch.zeros(length, hidden, device=device))


def blocks(tokenizer, corpus: str, count: int, length: int) -> torch.Tensor:
    """(count, length) token ids: the first `count` documents of at least `length` tokens, truncated."""
    rows = []
    for document in iter_corpus([corpus]):
        ids = tokenizer(document.text, truncation=True, max_length=length)["input_ids"]
        if len(ids) == length:
            rows.append(ids)
        if len(rows) == count:
            break
    return torch.tensor(rows)


def batch_of(input_ids: torch.Tensor, tokenizer) -> dict[str, torch.Tensor]:
    special = torch.isin(input_ids, torch.tensor(tokenizer.all_special_ids))
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "special_tokens_mask": special,
            "word_starts": ~special}


def build(choice: str, tokenizer, seed: int, length: int):
    special = {"pad": tokenizer.pad_token_id, "cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id}
    config = architecture_adapter("deberta-v2").scratch_config("deberta-v2", len(tokenizer), special,
                                                                hidden_size=128, layers=2, max_positions=512)
    torch.manual_seed(seed)
    encoder = AutoModelForMaskedLM.from_config(config)
    base = build_objective("retromae", encoder, tokenizer, SETTINGS)
    if choice == "rotary":
        return base
    torch.manual_seed(seed + 1000)  # the decoder's own weights, as RetroMAE's are, then the table
    objective = LearnedPositions(encoder, base.masking, length) if choice == "learned" else NoPositions(
        encoder, base.masking)
    objective.decoder.load_state_dict(base.decoder.state_dict())
    return objective


def train(choice: str, tokenizer, train_ids, held_out, seed: int, args: argparse.Namespace) -> dict[str, float]:
    objective = build(choice, tokenizer, seed, train_ids.shape[1]).train()
    optimizer = torch.optim.AdamW(objective.parameters(), lr=args.learning_rate)
    warmup = max(1, args.steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    generator = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    size = args.batch_size
    for step in range(args.steps):
        rows = train_ids[(step * size) % (len(train_ids) - size + 1):][:size]
        loss = objective(batch_of(rows, tokenizer), generator)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    seconds = time.perf_counter() - started
    objective.eval()
    with torch.no_grad():
        losses = [objective(batch_of(held_out[i:i + 16], tokenizer), torch.Generator().manual_seed(i))
                  for i in range(0, len(held_out), 16)]
    return {"decoder": statistics.mean(loss["decoder"].item() for loss in losses),
            "encoder_mlm": statistics.mean(loss["encoder_mlm"].item() for loss in losses),
            "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--corpus", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "pretrain"
                                                / "nltk-english.jsonl"))
    args = parser.parse_args()
    print(machine_header(), flush=True)
    texts = [document.text for document in itertools.islice(iter_corpus([args.corpus]), 3000)]
    tokenizer = family_tokenizer(texts, "deberta-v2", args.vocab_size)
    ids = blocks(tokenizer, args.corpus, 4000 + 64, args.length)
    train_ids, held_out = ids[:-64], ids[-64:]
    counts = torch.bincount(train_ids.flatten(), minlength=len(tokenizer)).float()
    entropy = -(counts[counts > 0] / counts.sum() * (counts[counts > 0] / counts.sum()).log()).sum().item()
    print(f"DeBERTa-v3-shaped, hidden 128, 2 layers, Unigram vocabulary {args.vocab_size:,}; {args.steps} steps of "
          f"{args.batch_size} x {args.length} ({len(train_ids)} training blocks, unigram entropy {entropy:.2f} "
          f"nats); held-out: 64 blocks; threads={torch.get_num_threads()}")
    print(f"{'decoder positions':<20}{'seed':>6}{'held-out decoder':>18}{'held-out encoder MLM':>22}{'seconds':>10}")
    for seed, choice in itertools.product(args.seeds, CHOICES):
        result = train(choice, tokenizer, train_ids, held_out, seed, args)
        print(f"{choice:<20}{seed:>6}{result['decoder']:>18.3f}{result['encoder_mlm']:>22.3f}"
              f"{result['seconds']:>10.1f}", flush=True)


if __name__ == "__main__":
    with library_output(verbose=False):
        main()
