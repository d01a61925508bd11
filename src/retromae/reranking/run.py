"""Cross-encoder rerankers: the teachers of distillation. Train one on queries with mined negatives, and score
(query, passage) pairs with it.

Owns `train_reranker` (a sequence-classification head with one logit on any encoder, trained on the loop of
`retromae.training.loop` with a listwise softmax cross-entropy over each query's group, the positive first: the
localized contrastive estimation of Gao et al., 2021, "Rethink Training of BERT Rerankers in Multi-Stage Retrieval
Pipeline"), `CrossEncoder` (load a trained one, never a folder without its classifier head; score pairs) and
`score_training_file` (write teacher scores `pos_scores` / `neg_scores` into a training file). Output:
`OUTPUT/reranker/` (a Hugging Face `AutoModelForSequenceClassification` folder with its tokenizer), `config.json`,
`metrics.jsonl`, `checkpoints/`.
Does not own its options (`retromae.reranking.config`), data formats, batching or mining (shared with `finetune`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForSequenceClassification, BatchEncoding, PreTrainedTokenizerBase

from retromae.data.long_texts import clip_texts
from retromae.data.training_groups import load_training_data, read_training_records, write_training_records
from retromae.finetuning.batches import GroupBatchSampler, GroupDataset
from retromae.finetuning.negatives import Miner
from retromae.models.encoder import Encoder, lowercase_as_declared
from retromae.models.finite import check_vectors, check_weights
from retromae.models.masked_lm import check_max_length, position_limit
from retromae.models.model_source import check_tokenizer, resolve_model
from retromae.models.pretrained import load_model, load_tokenizer
from retromae.reranking.config import RerankerConfig, ScoreConfig
from retromae.runtime.console import Result, given, progress
from retromae.runtime.devices import resolve_device
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.io import atomic_directory
from retromae.runtime.options import ConfigError, checked_arguments
from retromae.runtime.run_folder import claim_file, input_paths
from retromae.training.loop import Trainer
from retromae.training.setup import claim_output, start_run, whole_model

RERANKER_DIR = "reranker"
DEFAULT_PAIR_LENGTH = 256  # tokens of a (query, passage) pair unless --max-length says otherwise
# Cut the longer side a token at a time: the passage alone while the query is under half the pair's budget, both
# beyond it (`only_second` refuses a query longer than the budget outright).
PAIR_TRUNCATION = "longest_first"


def tokenize_pairs(tokenizer: PreTrainedTokenizerBase, queries: Sequence[str], passages: Sequence[str],
                   max_length: int) -> BatchEncoding:
    """The padded (query, passage) pairs as tensors, each at most `max_length` tokens (long passages clipped first)."""
    return tokenizer(list(queries), clip_texts(tokenizer, passages, max_length), truncation=PAIR_TRUNCATION,
                     max_length=max_length, padding=True, return_tensors="pt")


class PairCollator:
    """Tokenises resolved groups into (B * G) (query, passage) pairs: input_ids, attention_mask[, token_type_ids]."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int) -> None:
        self.tokenizer, self.max_length = tokenizer, max_length

    def __call__(self, groups: list[tuple[str, list[str], object]]) -> dict[str, torch.Tensor]:
        queries = [query for query, texts, _ in groups for _ in texts]
        passages = [text for _, texts, _ in groups for text in texts]
        return dict(tokenize_pairs(self.tokenizer, queries, passages, self.max_length))


class ListwiseObjective(nn.Module):
    """Softmax cross-entropy of each query's group logits (B, G), the positive at column 0."""

    def __init__(self, model: nn.Module, group_size: int) -> None:
        super().__init__()
        self.model, self.group_size = model, group_size

    def forward(self, batch: dict[str, torch.Tensor],
                generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        logits = self.model(**batch).logits.view(-1, self.group_size).float()  # (B, G)
        return {"loss": F.cross_entropy(logits, logits.new_zeros(logits.shape[0], dtype=torch.long))}


def _load_classifier(name: str, trained: bool):
    """The one-logit classifier and tokenizer of `name`. `trained`: the folder must hold the classifier head (a
    cross-encoder that scores); otherwise a head it lacks starts fresh (a reranker about to be trained)."""
    source = resolve_model(name)
    what = f"--model {name}"
    tokenizer = load_tokenizer(source.transformer, what=what, needs=("pair",))
    lowercase_as_declared(tokenizer, source)
    model, fresh = load_model(AutoModelForSequenceClassification, source.transformer, what=what, fresh_head=True,
                              num_labels=1)
    if trained and fresh:
        heads = sorted(fresh, key=lambda key: (key.startswith(f"{model.base_model_prefix}."), key))
        raise ModelLoadError(f"--model {name}: not a trained cross-encoder: it has no classifier head "
                             f"({', '.join(heads[:2])} would start random, so every score would be noise); pass the "
                             "reranker/ folder of `retromae train-reranker` or its output folder")
    check_tokenizer(tokenizer, what, model.config.vocab_size)
    check_weights(model, name)
    return model, tokenizer


def _training_set(config: RerankerConfig, accelerator):
    data = load_training_data(config.data, config.split)
    source = config.negatives if config.negatives != "auto" else ("bm25" if Path(config.data).is_dir() else "file")
    if source == "file" and not any(example.negatives for example in data.examples):
        raise ConfigError(f"--negatives: {data.source} lists no negatives; use --negatives bm25 or model")
    if source in ("bm25", "model"):
        encoder = Encoder.load(config.model, device=accelerator.device) if source == "model" else None
        prefixes = {"query": config.query_prefix, "passage": config.passage_prefix}
        Miner(data, config, encoder, prefixes=prefixes).mine(source, accelerator, config.seed)
    return data


def pair_length(model_config, requested: int | None) -> int:
    """The tokens of a (query, passage) pair: --max-length as given, by default `DEFAULT_PAIR_LENGTH`, at most what
    the model reads (a default never exceeds the model; a value given does, and is refused by the length check)."""
    if requested is not None:
        return requested
    return min(DEFAULT_PAIR_LENGTH, position_limit(model_config) or DEFAULT_PAIR_LENGTH)


def train_reranker(config: RerankerConfig) -> Path:
    """Train a cross-encoder as configured; returns the output folder (the model is in `reranker/`)."""
    output = Path(config.output)
    accelerator = start_run(config)
    model, tokenizer = _load_classifier(config.model, trained=False)
    config.max_length = pair_length(model.config, config.max_length)
    check_max_length(model.config, config.max_length, "max_length", tokenizer, pair=True)
    claim_output(config, "train-reranker", (RERANKER_DIR,), accelerator)
    data = _training_set(config, accelerator)

    def sampler(rank: int, world: int, start: int) -> GroupBatchSampler:
        return GroupBatchSampler(data, config.batch_size, config.group_size, config.seed, rank, world, start,
                                 accumulation=config.gradient_accumulation_steps)

    trainer = Trainer(ListwiseObjective(model, config.group_size), GroupDataset(data),
                      PairCollator(tokenizer, config.max_length), config, accelerator=accelerator,
                      batch_sampler=sampler, description=f"training the reranker ({config.max_steps:,} steps)")
    trainer.run()
    def fresh() -> ListwiseObjective:  # the structure the gathered weights go into (FSDP, DeepSpeed)
        return ListwiseObjective(_load_classifier(config.model, trained=False)[0], config.group_size)

    trained = whole_model(accelerator, trainer.model, fresh)
    if accelerator.is_main_process:
        with atomic_directory(output / RERANKER_DIR) as staging:
            trained.model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
    accelerator.wait_for_everyone()
    trainer.say_summary()
    return output


class CrossEncoder:
    """A one-logit sequence classifier scoring (query, passage) pairs."""

    def __init__(self, name: str, device: str | None = None, max_length: int | None = None) -> None:
        self.name = name
        self.device = resolve_device(device)  # before loading: a missing device is said at once
        self.model, self.tokenizer = _load_classifier(name, trained=True)
        max_length = pair_length(self.model.config, max_length)
        check_max_length(self.model.config, max_length, "max_length", self.tokenizer, pair=True)
        self.model.to(self.device).eval()
        self.max_length = max_length

    @checked_arguments(ScoreConfig, text_lists=("queries", "passages"), unchecked=("show_progress",),
                       batch_size="batch_size")
    @torch.inference_mode()
    def score(self, queries: Sequence[str], passages: Sequence[str], batch_size: int = 64,
              show_progress: bool = True) -> np.ndarray:
        """(N,) float32 logits of the pairs (queries[i], passages[i]); batches sorted by length. The arguments are
        checked as `retromae score`'s options and texts are (`runtime.options.checked_arguments`)."""
        if len(queries) != len(passages):
            raise ConfigError(f"passages: expected one passage per query, got {len(passages):,} passages for "
                              f"{len(queries):,} queries")
        order = np.argsort([-len(q) - len(p) for q, p in zip(queries, passages, strict=True)], kind="stable")
        scores = np.empty(len(order), dtype=np.float32)
        with progress(f"scoring {len(order):,} pairs", len(order), "pair", enabled=show_progress) as bar:
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]
                tokens = tokenize_pairs(self.tokenizer, [queries[r] for r in rows], [passages[r] for r in rows],
                                        self.max_length).to(self.device)
                scores[rows] = self.model(**tokens).logits[:, 0].float().cpu().numpy()
                bar.update(len(rows))
        check_vectors(scores[:, None], f"the scores of {self.name}")
        return scores


def score_training_file(scorer: CrossEncoder, data: str | Path, output: str | Path, batch_size: int = 64) -> int:
    """Copy a training file, adding `pos_scores` and `neg_scores` from the cross-encoder; returns pairs scored."""
    records = [record for _, record in read_training_records(data)]
    queries = [r["query"] for r in records for _ in (*r["pos"], *r.get("neg", []))]
    passages = [text for r in records for text in (*r["pos"], *r.get("neg", []))]
    scores = scorer.score(queries, passages, batch_size).tolist()
    position = 0
    for record in records:
        count = len(record["pos"])
        record["pos_scores"] = scores[position:position + count]
        record["neg_scores"] = scores[position + count:position + count + len(record.get("neg", []))]
        position += count + len(record["neg_scores"])
    write_training_records(records, output)
    return len(scores)


def score(config: ScoreConfig) -> Result:
    """Score a training file with a cross-encoder as `config` says; returns the training file written
    (`retromae.score(...)`) and the line saying so."""
    claim_file(config.output, config.overwrite, inputs=input_paths(config))
    scorer = CrossEncoder(config.model, config.device, config.max_length)
    count = score_training_file(scorer, config.data, config.output, config.batch_size)
    return Result(Path(config.output), (f"scored {count} pairs into {given(config.output)}",))
