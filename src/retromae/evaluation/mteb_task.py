"""A BEIR folder as an mteb v2 retrieval task: models this tool exports run under mteb unchanged, offline.

Owns: `beir_task(folder, split)`, an mteb `AbsTaskRetrieval` whose corpus, queries and judgments are read from a
local BEIR (or MS MARCO) folder by `retromae.data.retrieval_sets` instead of from the Hugging Face Hub. mteb (`pip
install mteb`, an optional dependency) is imported only when a task is built. Does not own mteb's metrics or
search, nor any model: `mteb.evaluate(SentenceTransformer(RUN/sentence-transformer), [beir_task(...)])` runs an
export as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retromae.data.retrieval_sets import load_retrieval_set
from retromae.runtime.errors import RetroMAEError


def beir_task(folder: str | Path, split: str = "test", name: str | None = None) -> Any:
    """An mteb retrieval task over the `split` queries of a BEIR folder, named `name` (default: the folder's)."""
    try:  # mteb and datasets: optional, and only when an mteb task is built
        from datasets import Dataset
        from mteb.abstasks.retrieval import AbsTaskRetrieval
        from mteb.abstasks.task_metadata import TaskMetadata
    except ImportError as error:
        raise RetroMAEError("an mteb task needs mteb 2 or later: pip install 'retromae[mteb]'") from error
    data = load_retrieval_set(Path(folder), split)

    class LocalBEIRTask(AbsTaskRetrieval):
        metadata = TaskMetadata(
            name=name or Path(folder).name, description=f"the BEIR folder {folder}, {split} split", type="Retrieval",
            dataset={"path": str(folder), "revision": "local"}, category="t2t", modalities=["text"],
            eval_splits=[split], eval_langs=["eng-Latn"], main_score="ndcg_at_10")

        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            corpus = [{"id": doc_id, "title": passage.title, "text": passage.text}
                      for doc_id, passage in data.corpus.items()]
            queries = [{"id": query_id, "text": text} for query_id, text in data.queries.items()]
            self.dataset = {"default": {split: {"corpus": Dataset.from_list(corpus),
                                                "queries": Dataset.from_list(queries),
                                                "relevant_docs": data.qrels, "top_ranked": None}}}
            self.data_loaded = True

    return LocalBEIRTask()
