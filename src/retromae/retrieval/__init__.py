"""Retrieval: encode texts into vector folders, faiss/numpy indexes, BM25 with bm25s, dense search into runs.

Submodules: `config` (`EncodeConfig`, the options of `retromae encode`), `encode` (resumable, sharded encoding to
disk), `index` (build/save/load/search), `bm25`, `search` (dense search end to end, hits → runs). Reading data
files and computing metrics live elsewhere (`retromae.data`, `retromae.evaluation`).
"""
