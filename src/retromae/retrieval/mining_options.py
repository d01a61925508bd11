"""The options of hard-negative mining, declared apart from `retromae.retrieval.mining` so that parsing them
imports no numpy, faiss or torch.

Owns `MiningOptions` (the rank window and negatives per query) shared by `retromae mine`, `finetune` and
`train-reranker`, and the window's check against the passages ranked (`check_window`: a window wholly beyond them
is refused before the work; one reaching past them is cut there, as a top-k is). Does not own ranking or choosing
negatives (`retromae.retrieval.mining`).
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

    def check_window(self, passages: int, source: str) -> None:
        """ConfigError naming --rank-start when the window lies wholly beyond the `passages` of `source` that mining
        ranks (a ranking holds each at most once): it would mine no negative at all."""
        require(self.rank_start <= passages, "rank_start",
                f"the window of ranks {self.rank_start} to {self.rank_end} lies beyond the {passages:,} passages of "
                f"{source} that mining ranks, so no negative could be mined; give --rank-start {passages} or less")
