"""Retrieval: encode texts into vector folders, faiss/numpy indexes, BM25 with bm25s, dense search into runs.

Submodules: `config` (the options of `encode`, `index`, `search`, `bm25` and `mine`, torch-free), `run` (what each
of those commands does), `encode` (resumable, sharded encoding to disk), `index` (build/save/load/search), `bm25`,
`search` (dense search end to end, hits → runs), `searcher` (`Searcher`: an index folder searched by text), `fusion`
(and its depth), `top_k` (the cut of a backend's top-k), `lineage` (derived files against their records), `texts`,
`mining`. Reading data files, the order of a ranking (`retromae.data.ranking`) and computing metrics live elsewhere
(`retromae.data`, `retromae.evaluation`).
"""
