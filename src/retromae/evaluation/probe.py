"""Retrieval probes during pre-training: how good a zero-shot retriever the encoder is, every N steps.

Owns: the seeded sample a probe evaluates (queries of a BEIR or MS MARCO folder, their judged documents and other
documents), and `Probe`, the Trainer's `log_extra` hook: at step 0 of a fresh run, every `probe_every` steps and at
the last step it encodes the sample with the training encoder's [CLS] state (on the training device, main process,
inference mode, no random draws) and returns the probe scores (`probe_ndcg@10`, `probe_recall@100`,
`probe_sts_spearman`: the metric registry's reported keys, `evaluation.probe_options.probe_metrics`) and `probe_seconds`
for the step's record in metrics.jsonl. With `keep_best_probe` it exports the best-scoring encoder
to `OUTPUT/best-probe/` (encoder/, pretrain_head.safetensors, probe.json; sentence-transformer/ at the end), a
folder the checkpoint pruning never sees. Does not own the training loop, encoding, search or metric definitions.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from retromae.data.retrieval_sets import RetrievalSet, load_retrieval_set, load_sts_pairs
from retromae.evaluation.experiments import read_metrics
from retromae.evaluation.metric_registry import CORRELATION, RANKING, cutoffs
from retromae.evaluation.metrics import evaluate_run, retrieval_depth
from retromae.evaluation.probe_options import BEST_PROBE_DIR, ProbeOptions, probe_metrics
from retromae.evaluation.sts import check_gold, sts_correlations
from retromae.models.encoder import Encoder, PoolingConfig
from retromae.models.export import export_encoder, export_sentence_transformer, save_head
from retromae.retrieval.search import TextOptions, dense_search
from retromae.runtime.io import atomic_directory, write_text_atomic
from retromae.runtime.lines import read_json_file

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from retromae.training.loop import Trainer

logger = logging.getLogger(__name__)

BEST_FILE = "probe.json"
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def sample_retrieval_set(data: RetrievalSet, queries: int, documents: int, seed: int) -> RetrievalSet:
    """At most `queries` judged queries, their judged documents and a sample of others up to `documents` in all;
    a pure function of the set and `seed`."""
    rng = np.random.default_rng(seed)
    query_ids = sorted(data.queries)
    if len(query_ids) > queries:
        query_ids = sorted(rng.choice(query_ids, size=queries, replace=False).tolist())
    judged = sorted({doc_id for qid in query_ids for doc_id in data.qrels[qid]})
    others = sorted(set(data.corpus) - set(judged))
    room = max(0, documents - len(judged))
    if room < len(others):
        others = sorted(rng.choice(others, size=room, replace=False).tolist())
    return RetrievalSet(corpus={doc_id: data.corpus[doc_id] for doc_id in judged + others},
                        queries={qid: data.queries[qid] for qid in query_ids},
                        qrels={qid: data.qrels[qid] for qid in query_ids})


class Probe:
    """The Trainer's `log_extra` hook: probe scores at probe steps (empty elsewhere and on other processes)."""

    def __init__(self, options: ProbeOptions, tokenizer: PreTrainedTokenizerBase, max_length: int,
                 output: Path, is_main_process: bool = True, export_max_length: int | None = None):
        """`max_length`: the tokens a probe encodes; `export_max_length`: the length a best-probe export records
        (the run's final export's: `export.declared_max_length` of its source)."""
        self.options, self.tokenizer, self.max_length = options, tokenizer, max_length
        self.export_max_length = export_max_length
        self.best_folder = Path(output) / BEST_PROBE_DIR
        self.metrics_path = Path(output) / "metrics.jsonl"
        self.active = is_main_process
        self.best: float | None = None
        self.started = False
        self.retrieval = self.sts = None
        if self.active and options.probe:
            full = load_retrieval_set(Path(options.probe), options.probe_split)
            self.retrieval = sample_retrieval_set(full, options.probe_queries, options.probe_documents,
                                                  options.probe_seed)
            self.corpus = self.retrieval.corpus_texts()
        if self.active and options.probe_sts:
            self.sts = load_sts_pairs(Path(options.probe_sts))
            check_gold(self.sts[2], options.probe_sts)  # before training: no correlation with constant gold scores

    def __call__(self, trainer: Trainer) -> dict[str, float]:
        step = trainer.state.step
        if not self.active or not (step % self.options.probe_every == 0 or step == trainer.config.max_steps):
            return {}
        if not self.started:
            self._restore_best()
        scores = self.evaluate(trainer)
        if self.options.keep_best_probe:
            self._keep_if_best(trainer, scores)
        return scores

    def evaluate(self, trainer: Trainer) -> dict[str, float]:
        """Every probe score of the training model as it is now; the model is left in the mode it was in."""
        started = time.perf_counter()
        objective = trainer.unwrapped_model
        training = objective.training
        encoder = Encoder(objective.encoder.base_model, self.tokenizer, PoolingConfig(objective.pooling, False),
                          self.max_length, AMP_DTYPES.get(trainer.accelerator.mixed_precision))
        device = encoder.device
        # Eval mode draws nothing at random; forking the RNG guarantees the training trajectory whatever the backbone.
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            scores = self._scores(encoder)
        objective.train(training)
        scores["probe_seconds"] = time.perf_counter() - started
        return scores

    def _scores(self, encoder: Encoder) -> dict[str, float]:
        scores: dict[str, float] = {}
        batch = self.options.probe_batch_size
        if self.retrieval is not None:
            probed = probe_metrics(RANKING)
            ks = cutoffs(list(probed.values()))
            run = dense_search(encoder, self.corpus, self.retrieval.queries, k=retrieval_depth(max(ks), self.retrieval),
                               passages=TextOptions(), questions=TextOptions(), batch_size=batch, show_progress=False)
            results = evaluate_run(self.retrieval.qrels, run, ks, source=self.options.probe)
            scores.update({f"probe_{name}": results[key] for name, key in probed.items()})
        if self.sts is not None:
            first, second, gold = self.sts
            vectors = [encoder.encode(side, batch_size=batch, show_progress=False) for side in (first, second)]
            correlations = sts_correlations(*vectors, gold, self.options.probe_sts)
            scores.update({f"probe_{name}": correlations[key] for name, key in probe_metrics(CORRELATION).items()})
        return scores

    def _restore_best(self) -> None:
        """The best score logged so far (metrics.jsonl as the Trainer kept it); a best-probe export whose step is no
        longer logged (written after the checkpoint a run resumed from) is removed."""
        self.started = True
        key = self.options.probe_metric_key
        logged = read_metrics(self.metrics_path) if self.metrics_path.exists() else []
        probes = {record["step"]: record[key] for record in logged if key in record}
        self.best = self.options.probe_metric_entry.best(probes.values())
        exported = self._exported_step()
        if exported is not None and exported not in probes:
            logger.warning("%s: removing the export of step %d, which the resumed run has not logged",
                           self.best_folder, exported)
            shutil.rmtree(self.best_folder)

    def _exported_step(self) -> int | None:
        path = self.best_folder / BEST_FILE
        return read_json_file(path).get("step") if path.is_file() else None

    def _keep_if_best(self, trainer: Trainer, scores: dict[str, float]) -> None:
        key = self.options.probe_metric_key
        if self.best is not None and not self.options.probe_metric_entry.better(scores[key], self.best):
            return
        self.best = scores[key]
        objective = trainer.unwrapped_model
        info = {"step": trainer.state.step, "tokens": trainer.state.tokens, "metric": key, **scores}
        with atomic_directory(self.best_folder) as staging:
            export_encoder(objective.encoder, self.tokenizer, staging / "encoder", pooling=objective.pooling,
                           max_length=self.export_max_length)
            save_head(objective, staging)
            write_text_atomic(staging / BEST_FILE, json.dumps(info, indent=2) + "\n")

    def finish(self) -> None:
        """After training: the best-probe encoder also as a sentence-transformers folder, and a warning when it is
        the untrained model (no probe after step 0 scored higher)."""
        if self.active and self.options.keep_best_probe and (self.best_folder / "encoder").is_dir():
            export_sentence_transformer(self.best_folder / "encoder", self.best_folder / "sentence-transformer")
            if self._exported_step() == 0:
                logger.warning("%s holds the untrained model: its %s at step 0, %.4f, was the best probe score, no "
                               "later probe scored higher; the trained model is in encoder/", self.best_folder,
                               self.options.probe_metric_key, self.best)
