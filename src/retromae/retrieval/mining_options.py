"""The options of hard-negative mining, declared apart from `retromae.retrieval.mining` so that parsing them
imports no numpy, faiss or torch.

Owns `MiningOptions` (the rank window and negatives per query) shared by `retromae mine`, `finetune` and
`train-reranker`. Does not own ranking or choosing negatives (`retromae.retrieval.mining`).
"""

from __future__ import annotations

import dataclasses

from retromae.runtime.options import POSITIVE, TOP_K, Options, option, require


@dataclasses.dataclass(kw_only=True)
class MiningOptions(Options):
    """Which ranked passages become negatives."""

    OPTION_GROUP = "negative mining"

    rank_start: int = option(3, "first rank (1-based) of the window negatives are drawn from", TOP_K)
    rank_end: int = option(100, "last rank (inclusive) of the window negatives are drawn from", TOP_K)
    negatives_per_query: int = option(30, "negatives kept per query (fewer when the window holds fewer)", POSITIVE)

    def __post_init__(self) -> None:
        require(self.rank_end >= self.rank_start, "rank_end", "must not be below --rank-start")
