"""How much each loss term of RetroMAE + contrastive pulls on the shared encoder, from scratch.

Trains `retromae+contrastive` (or, with `--without-contrastive`, RetroMAE alone) on span pairs of a corpus with
AdamW, a 5% warm-up and clipping, as `retromae pretrain` does, and at chosen steps takes the gradient of each
term (encoder MLM, decoder, contrastive) on the encoder body alone, on one fixed batch: its norm, its cosine with
the MLM term's, and the MLM term's share of the summed gradient (its projection on the sum). A diagnostic for why
the sum can stay on the unigram plateau where RetroMAE alone leaves it (docs/performance.md).

Run: PYTHONPATH=src python benchmarks/objective_gradients.py --corpus ../shared/data/pretrain/nltk-english.jsonl \
       --documents 400 --steps 200 --temperature 0.05
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch
from common import machine_header, minilm_path
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from retromae.data.batch_sampler import ResumableBatchSampler
from retromae.data.contrastive import PairCollator, SpanPairDataset
from retromae.data.token_store import TokenStore
from retromae.objectives import build_objective
from retromae.objectives.contrastive import contrastive_loss
from retromae.training.loop import mask_generator
from retromae.training.optimizer import linear_schedule


def term_losses(objective, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The objective's loss terms with their graphs (its forward returns them detached)."""
    embeddings, encoder_loss, decoder_loss = objective.reconstruction_losses(batch, generator)
    return {"encoder_mlm": encoder_loss, "decoder": decoder_loss,
            "contrastive": contrastive_loss(embeddings, objective.temperature)}


def gradient_report(objective, batch: dict[str, torch.Tensor], seed: int) -> dict[str, float]:
    """Per term: the norm of its gradient on the encoder body, and its cosine with the MLM term's."""
    body = [p for p in objective.encoder.base_model.parameters() if p.requires_grad]
    losses = term_losses(objective, batch, torch.Generator().manual_seed(seed))
    flat = {}
    for name, loss in losses.items():
        grads = torch.autograd.grad(loss, body, retain_graph=True, allow_unused=True)
        flat[name] = torch.cat([(g if g is not None else torch.zeros_like(p)).flatten()
                                for g, p in zip(grads, body, strict=True)])
    report = {f"{name} loss": float(losses[name]) for name in losses}
    report.update({f"|g {name}|": float(vector.norm()) for name, vector in flat.items()})
    mlm = flat["encoder_mlm"]
    for name in ("decoder", "contrastive"):
        report[f"cos(mlm, {name})"] = float(torch.nn.functional.cosine_similarity(mlm, flat[name], dim=0))
    total = sum(flat.values())
    report["mlm share of |g sum|"] = float(mlm @ total / total.norm() ** 2)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--documents", type=int, default=400, help="first N documents of the corpus")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--report-at", type=int, nargs="+", default=[0, 50, 100, 200])
    parser.add_argument("--temperature", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=16, help="pairs per step")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--without-contrastive", action="store_true", help="train on encoder MLM + decoder only")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(42)
    encoder = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=args.hidden,
                                         num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 64),
                                         intermediate_size=4 * args.hidden))
    settings = SimpleNamespace(encoder_mask_ratio=0.3, decoder_mask_ratio=0.5, whole_word_mask=False,
                               decoding="enhanced", decoder_layers=None, temperature=args.temperature,
                               contrastive_weight=1.0)
    objective = build_objective("retromae+contrastive", encoder, tokenizer, settings).train()
    with tempfile.TemporaryDirectory() as folder:
        subset = Path(folder) / "corpus.jsonl"
        with open(args.corpus, encoding="utf-8") as source:
            lines = [line for _, line in zip(range(args.documents), source, strict=False)]
        subset.write_text("".join(lines), encoding="utf-8")
        store = TokenStore.build_or_load([str(subset)], tokenizer, args.max_length, cache_dir=Path(folder) / "cache")
        dataset, collate = SpanPairDataset(store, 42), PairCollator(tokenizer)
        sampler = iter(ResumableBatchSampler(len(dataset), args.batch_size, 42))
        fixed = collate(dataset.__getitems__(list(range(args.batch_size))))
        optimizer = torch.optim.AdamW(objective.parameters(), lr=args.learning_rate, weight_decay=0.01)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(0, 0.05, args.steps))
        trained = ("encoder_mlm", "decoder") if args.without_contrastive else ("encoder_mlm", "decoder", "contrastive")
        for step in range(args.steps + 1):
            if step in args.report_at:
                print(json.dumps({"step": step, **{k: round(v, 4) for k, v in gradient_report(objective, fixed,
                                                                                                 7).items()}}))
            if step == args.steps:
                break
            batch = collate(dataset.__getitems__(next(sampler)))
            losses = term_losses(objective, batch, mask_generator(42, 0, step, torch.device("cpu")))
            sum(losses[name] for name in trained).backward()
            torch.nn.utils.clip_grad_norm_(objective.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
