"""Batches of query groups for contrastive training: which queries, which passages, and their token tensors.

Owns `GroupBatchSampler` (seeded, resumable at any micro-batch, split by process like the loop's default
sampler) and `GroupCollator` (tokenise and pad queries and passages). A group is one query with `group_size`
passages: a positive, then hard negatives. Within a global batch (every process's groups together) no passage
appears twice and no passage is a positive of another query of the batch, so in-batch and cross-device
negatives are never false negatives by construction of the batch:

- each epoch's queries are shuffled (seed + epoch) and packed greedily into batches whose queries have disjoint
  positive sets; a query that clashes waits for the next batch;
- each batch's positive and negatives are drawn from a generator seeded by (seed, batch position), from the
  example's current negatives (they may be refreshed during training), skipping passages the batch already
  holds; when too few remain, random passages of the training set fill the group (teacher score -inf).

Does not own the data (`data.training_groups`), mining or the model.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from retromae.data.batch_sampler import check_step
from retromae.data.long_texts import clip_texts
from retromae.data.training_groups import TrainingSet
from retromae.runtime.errors import DataError

MAX_FILL_TRIES = 1000


@dataclass(frozen=True)
class Group:
    """One query (example index) with its passage rows (positive first) and their teacher scores (or None)."""

    example: int
    passages: tuple[int, ...]
    scores: tuple[float, ...] | None = None


def plan_epoch(positives: Sequence[frozenset[int]], order: Sequence[int], global_batch: int) -> list[list[int]]:
    """Example indices per batch, in `order`, packed so that a batch's queries share no positive passage."""
    remaining = deque(order)
    batches = []
    while len(remaining) >= global_batch:
        batch, used, waiting = [], set(), []
        while remaining and len(batch) < global_batch:
            example = remaining.popleft()
            if used.isdisjoint(positives[example]):
                batch.append(example)
                used.update(positives[example])
            else:
                waiting.append(example)
        remaining.extendleft(reversed(waiting))
        if len(batch) < global_batch:
            break
        batches.append(batch)
    return batches


class GroupBatchSampler:
    """Yields each process's micro-batch of `Group`s, forever, starting at micro-batch `start`; an optimiser step of
    `accumulation` global batches may wrap round the data (`data.batch_sampler.check_step`)."""

    def __init__(self, data: TrainingSet, batch_size: int, group_size: int, seed: int, rank: int = 0,
                 world_size: int = 1, start: int = 0, with_scores: bool = False, accumulation: int = 1) -> None:
        self.data, self.batch_size, self.group_size, self.seed = data, batch_size, group_size, seed
        self.rank, self.start, self.with_scores = rank, start, with_scores
        self.global_batch = batch_size * world_size
        self.positives = [frozenset(example.positives) for example in data.examples]
        if len(data.texts) < self.global_batch * group_size:
            raise DataError(f"{data.source}: {len(data.texts)} distinct passages, fewer than one global batch "
                            f"of {self.global_batch} groups of {group_size}")
        batches = len(self.epoch_plan(0))
        if not batches:
            raise DataError(f"{data.source}: cannot form one batch of {self.global_batch} queries with distinct "
                            f"positives ({len(data.examples)} queries)")
        check_step(batches, accumulation, f"{data.source}: its {len(data.examples):,} queries")

    def epoch_plan(self, epoch: int) -> list[list[int]]:
        order = torch.randperm(len(self.positives), generator=torch.Generator().manual_seed(self.seed + epoch))
        return plan_epoch(self.positives, order.tolist(), self.global_batch)

    @property
    def batches_per_epoch(self) -> int:
        return len(self.epoch_plan(0))

    def __iter__(self) -> Iterator[list[Group]]:
        epoch, position = 0, 0
        while True:
            plan = self.epoch_plan(epoch)
            if not plan:
                raise DataError(f"{self.data.source}: epoch {epoch} cannot form a batch of queries with distinct "
                                "positives")
            for offset in range(max(self.start - position, 0), len(plan)):
                groups = self.draw(plan[offset], position + offset)
                yield groups[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
            position += len(plan)
            epoch += 1

    def draw(self, batch: list[int], position: int) -> list[Group]:
        """The groups of one global batch: a positive and `group_size - 1` negatives per query, all distinct."""
        rng = np.random.default_rng([self.seed, position])
        taken: set[int] = set().union(*(self.positives[example] for example in batch))
        groups = []
        for example in batch:
            positive = self._pick(rng, self.data.examples[example].positives)
            negatives = self._negatives(rng, example, taken)
            taken.update(negatives)
            groups.append(self._group(example, (positive, *negatives)))
        return groups

    @staticmethod
    def _pick(rng: np.random.Generator, rows: list[int]) -> int:
        return rows[int(rng.integers(len(rows)))]

    def _negatives(self, rng: np.random.Generator, example: int, taken: set[int]) -> list[int]:
        wanted = self.group_size - 1
        candidates = [row for row in self.data.examples[example].negatives if row not in taken]
        if len(candidates) > wanted:
            candidates = [candidates[i] for i in sorted(rng.choice(len(candidates), wanted, replace=False))]
        for _ in range(MAX_FILL_TRIES):
            if len(candidates) >= wanted:
                break
            row = int(rng.integers(len(self.data.texts)))
            if row not in taken and row not in candidates:
                candidates.append(row)
        if len(candidates) < wanted:
            raise DataError(f"{self.data.source}: cannot find {wanted} distinct negatives for a query; "
                            "lower --group-size or --batch-size")
        return candidates

    def _group(self, example: int, passages: tuple[int, ...]) -> Group:
        if not self.with_scores:
            return Group(example, passages)
        scores = self.data.examples[example].scores or {}
        return Group(example, passages, tuple(scores.get(row, float("-inf")) for row in passages))


class GroupDataset(torch.utils.data.Dataset):
    """Resolves a `Group` into texts: (query, passage texts, teacher scores or None)."""

    def __init__(self, data: TrainingSet) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data.examples)

    def __getitem__(self, group: Group) -> tuple[str, list[str], tuple[float, ...] | None]:
        return (self.data.examples[group.example].query, [self.data.texts[row] for row in group.passages],
                group.scores)


class GroupCollator:
    """Tokenises a micro-batch of resolved groups into padded tensors:

    query_input_ids / query_attention_mask (B, Lq), passage_input_ids / passage_attention_mask (B * G, Lp),
    and teacher_scores (B, G) when the groups carry scores.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, query_max_length: int, passage_max_length: int,
                 prefixes: dict[str, str] | None = None) -> None:
        self.tokenizer = tokenizer
        self.query_max_length, self.passage_max_length = query_max_length, passage_max_length
        self.prefixes = prefixes or {}  # side → the text put before each of its texts (`run.training_prefixes`)

    def _encode(self, texts: list[str], max_length: int, side: str) -> dict[str, torch.Tensor]:
        texts = clip_texts(self.tokenizer, texts, max_length, self.prefixes.get(side, ""))
        tokens = self.tokenizer(texts, truncation=True, max_length=max_length, padding=True,
                                return_token_type_ids=False, return_tensors="pt")
        return {f"{side}_input_ids": tokens["input_ids"], f"{side}_attention_mask": tokens["attention_mask"]}

    def __call__(self, groups: list[tuple[str, list[str], tuple[float, ...] | None]]) -> dict[str, torch.Tensor]:
        batch = self._encode([query for query, _, _ in groups], self.query_max_length, "query")
        batch.update(self._encode([text for _, texts, _ in groups for text in texts], self.passage_max_length,
                                  "passage"))
        if groups[0][2] is not None:
            batch["teacher_scores"] = torch.tensor([scores for _, _, scores in groups], dtype=torch.float32)
        return batch


def count_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Real tokens of a collated batch (queries and passages), for the loop's tokens/s."""
    return int(batch["query_attention_mask"].sum() + batch["passage_attention_mask"].sum())
