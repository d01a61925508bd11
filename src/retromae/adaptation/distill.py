"""`retromae adapt --objective distill`: the student learns the scores of a teacher on pseudo-queries of the corpus.

GPL's recipe with what a corpus alone gives: pseudo-queries of the kinds of --distill-kinds made from the training
documents (by default a sentence, or a word window in text without sentence marks, and a few of a document's highest
tf-idf words; its title on request), candidates from BM25 and from the base (each side's top --distill-candidates),
scored by the teacher: the hybrid (BM25 and the base fused by `retrieval.fusion`'s convex rule at its default weight
and its depth, each side's best 100 or --distill-candidates when more: the scores `retromae search` gives) or a
cross-encoder (`--teacher`). Each query keeps a list
of --list-size candidates (the teacher's top half, the rest drawn from its other candidates); the student, the base's
encoder in its own pooling, is trained on the teacher's scores over that list (`losses.listwise_kl` or
`losses.margin_mse`). The student scores by cosine (or dot product) at temperature STUDENT_TEMPERATURE; the
teacher's scores are divided by the temperature that gives them, on average over the lists, the spread the base's
own logits have there, so the teacher asks for reordering, not for a new scale.

Owns the queries' draw, the teacher's lists, the loop (AdamW, linear warm-up and decay, clipping) and the one file it
leaves: `OUTPUT/training/distilled/model.safetensors`, the student's encoder named as a training checkpoint names it,
which the guard reads as its candidate. A killed run restarts the distillation (deterministic under one seed); a
finished one is reused by --resume. Does not own the guard (`adaptation.guard`) or fusion and BM25
(`retromae.retrieval`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from retromae.adaptation.config import AdaptConfig
from retromae.adaptation.queries import KeywordQueries, sentence_query, title_query, training_kinds
from retromae.data.corpus import Document
from retromae.data.ranking import ranked
from retromae.losses.losses import listwise_kl, margin_mse
from retromae.models.encoder import AUTOCAST_NAMES, Encoder
from retromae.models.encoder_config import PoolingConfig
from retromae.retrieval.bm25 import BM25
from retromae.retrieval.fusion import DEPTH, candidate_depth, fuse_query
from retromae.retrieval.index import build_index, search
from retromae.runtime.console import progress, step
from retromae.runtime.errors import DataError
from retromae.runtime.io import atomic_path
from retromae.runtime.options import steps_from_passes
from retromae.training.checkpoint_state import MODEL_FILE
from retromae.training.setup import AUTOCAST_DTYPES, resolve_mixed_precision

STUDENT_TEMPERATURE = 0.05  # the cropping objective's: cosine / 0.05
DISTILLED = "distilled"


@dataclass
class TeacherLists:
    """Per query: its text, its candidates (document indices, the teacher's first first) and the teacher's logits."""

    queries: list[str]
    documents: np.ndarray  # (Q, L) int
    logits: np.ndarray  # (Q, L) float32, the teacher's scores divided by the matched temperature


def training_queries(documents: list[Document], count: int, seed: int, wanted: Sequence[str]) -> list[str]:
    """`count` pseudo-queries of documents drawn at random, of each kind of `wanted` in turn (`queries.training_kinds`:
    a sentence or word window, keywords, a title)."""
    rng = np.random.default_rng(seed)
    keywords = KeywordQueries([document.text for document in documents])
    make = {"sentence": lambda document: sentence_query(document.text, rng),
            "keywords": lambda document: keywords.query(document.text, rng), "title": title_query}
    kinds = training_kinds(documents, wanted)
    queries: list[str] = []
    for number, index in enumerate(rng.choice(len(documents), size=4 * count, replace=True).tolist()):
        query = make[kinds[number % len(kinds)]](documents[index])
        if query is not None:
            queries.append(query)
        if len(queries) == count:
            break
    return queries


def candidate_runs(encoder: Encoder, texts: list[str], queries: list[str], depth: int, max_length: int,
                   batch_size: int, prefixes: dict[str, str]) -> tuple[list[dict[int, float]],
                                                                       list[dict[int, float]], np.ndarray, np.ndarray]:
    """BM25's and the base's top `depth` per query (document index → score), and the base's vectors of the queries
    (Q, D) and of the documents (N, D), each side encoded with its prefix of `prefixes`."""
    ids = [str(i) for i in range(len(texts))]
    with step(f"BM25 over {len(texts):,} documents for {len(queries):,} pseudo-queries"):
        lexical = BM25().index(ids, texts).search({str(n): query for n, query in enumerate(queries)}, k=depth)
    documents = encoder.encode(texts, batch_size, max_length, prefixes["passage"],
                               description=f"encoding {len(texts):,} documents")
    vectors = encoder.encode(queries, batch_size, max_length, prefixes["query"],
                             description=f"encoding {len(queries):,} queries")
    scores, rows = search(build_index(documents), vectors, depth, ids=ids)  # (Q, depth) each
    dense = [{int(row): float(value) for row, value in zip(rows[n], scores[n], strict=True) if row >= 0}
             for n in range(len(queries))]
    lexical_runs = [{int(doc): value for doc, value in lexical.get(str(n), {}).items()} for n in range(len(queries))]
    return lexical_runs, dense, vectors, documents


def hybrid_teacher(lexical: dict[int, float], dense: dict[int, float], depth: int = DEPTH) -> dict[int, float]:
    """The fused score (convex, the default weight, each side's best `depth`) of each candidate of one query: the
    score `retromae search` gives it on a hybrid index."""
    return fuse_query(dense, lexical, depth=depth)


def candidates(lexical: dict[int, float], dense: dict[int, float], count: int) -> list[int]:
    """One query's candidates: the union of each side's best `count` (`data.ranking`'s order, ids the rows')."""
    return sorted({*ranked(lexical, count, _row_ids(lexical)), *ranked(dense, count, _row_ids(dense))})


def _row_ids(scores: dict[int, float]) -> dict[int, str]:
    """The id of each document row, as BM25 and the index know it (its row number)."""
    return {row: str(row) for row in scores}


def teacher_scores(config: AdaptConfig, queries: list[str], texts: list[str], lexical: list[dict[int, float]],
                   dense: list[dict[int, float]]) -> list[dict[int, float]]:
    """Per query, the teacher's score of each of its candidates (`candidates`, --distill-candidates a side): the
    hybrid's, fused over each side's full lists, or the cross-encoder's (--teacher)."""
    pools = [candidates(lex, den, config.distill_candidates) for lex, den in zip(lexical, dense, strict=True)]
    if config.teacher is not None:
        return cross_encoder_teacher(config.teacher, queries, texts, pools)
    depth = candidate_depth(config.distill_candidates)
    fused = [hybrid_teacher(lex, den, depth) for lex, den in zip(lexical, dense, strict=True)]
    return [{doc: scores[doc] for doc in pool} for pool, scores in zip(pools, fused, strict=True)]


def cross_encoder_teacher(teacher: str, queries: list[str], texts: list[str],
                          candidates: list[list[int]]) -> list[dict[int, float]]:
    """The cross-encoder's logit of each (query, candidate) pair."""
    from retromae.reranking.run import CrossEncoder  # the classifier stack: only for --teacher

    scorer = CrossEncoder(teacher)
    pairs = [(n, doc) for n, docs in enumerate(candidates) for doc in docs]
    logits = scorer.score([queries[n] for n, _ in pairs], [texts[doc] for _, doc in pairs]).tolist()
    scored: list[dict[int, float]] = [{} for _ in queries]
    for (n, doc), logit in zip(pairs, logits, strict=True):
        scored[n][doc] = logit
    return scored


def pick_list(scores: dict[int, float], size: int, rng: np.random.Generator) -> list[int] | None:
    """The teacher's top size//2 candidates and size − size//2 drawn from the rest, or None with too few."""
    if len(scores) < size:
        return None
    order = ranked(scores, ids=_row_ids(scores))
    top = size // 2
    drawn = rng.choice(len(order) - top, size=size - top, replace=False) + top
    return order[:top] + [order[i] for i in sorted(drawn.tolist())]


def matched_temperature(teacher: np.ndarray, base: np.ndarray) -> float:
    """The temperature that gives the teacher's scores (Q, L) the base's logits' (Q, L) mean spread per list."""
    spread = float(np.mean(np.std(teacher, axis=1)))
    target = float(np.mean(np.std(base, axis=1)))
    return spread / target if spread > 0 and target > 0 else 1.0


def teacher_lists(config: AdaptConfig, encoder: Encoder, documents: list[Document],
                  prefixes: dict[str, str]) -> TeacherLists:
    """The pseudo-queries, each one's list of candidates and the teacher's logits over it (matched temperature): the
    base's side of the hybrid and the base's logits encoded with `prefixes`, as the student trains (a cross-encoder
    teacher reads the texts as they are)."""
    texts = [document.text for document in documents]
    queries = training_queries(documents, config.distill_queries, config.seed, config.distill_kinds)
    depth = candidate_depth(config.distill_candidates)  # the hybrid teacher fuses at the fusion's depth
    lexical, dense, query_vectors, document_vectors = candidate_runs(
        encoder, texts, queries, depth, config.max_length, 64, prefixes)
    teacher = teacher_scores(config, queries, texts, lexical, dense)
    rng = np.random.default_rng(config.seed + 1)
    kept, lists = [], []
    for n, scores in enumerate(teacher):
        chosen = pick_list(scores, config.list_size, rng)
        if chosen is not None:
            kept.append(n)
            lists.append(chosen)
    if not lists:
        raise DataError(f"{', '.join(config.corpus)}: none of {len(queries):,} pseudo-queries found --list-size "
                        f"{config.list_size} candidates among BM25's and the base's top {config.distill_candidates}; "
                        "give a smaller --list-size or a larger --distill-candidates")
    documents_by_query = np.array(lists, dtype=np.int64)  # (Q, L)
    raw = np.array([[teacher[n][doc] for doc in row] for n, row in zip(kept, lists, strict=True)],
                   dtype=np.float32)  # (Q, L)
    base = np.einsum("qd,qld->ql", query_vectors[kept], document_vectors[documents_by_query]) / STUDENT_TEMPERATURE
    return TeacherLists([queries[n] for n in kept], documents_by_query,
                        (raw / matched_temperature(raw, base)).astype(np.float32))


def distill_loss(name: str, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """--distill-loss over a batch of lists (B, L) of logits."""
    return listwise_kl(student, teacher) if name == "kl" else margin_mse(student, teacher)


def student_logits(encoder: Encoder, queries: list[str], texts: list[str], max_length: int,
                   prefixes: dict[str, str]) -> torch.Tensor:
    """(B, L) logits of the student: its similarity of each query to each of its L texts over the temperature, each
    side with its prefix of `prefixes`."""
    query_ids = encoder.tokenize(queries, max_length, prefixes["query"])
    text_ids = encoder.tokenize(texts, max_length, prefixes["passage"])
    query_vectors = encoder.embed(*encoder.collate(query_ids))  # (B, D)
    text_vectors = encoder.embed(*encoder.collate(text_ids)).view(len(queries), -1, query_vectors.shape[-1])
    return torch.einsum("bd,bld->bl", query_vectors, text_vectors) / STUDENT_TEMPERATURE


def steps_of(config: AdaptConfig, queries: int) -> int:
    """--max-steps, else --passes over the lists at --batch-size // --list-size queries a step, at most --step-cap."""
    if config.max_steps is not None:
        return config.max_steps
    return steps_from_passes("--passes", config.passes, queries, max(1, config.batch_size // config.list_size),
                             "queries", cap=config.step_cap)


def schedule(optimizer: torch.optim.Optimizer, steps: int, warmup_ratio: float) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over `warmup_ratio` of the steps, then linear decay to 0."""
    warmup = max(1, round(warmup_ratio * steps))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda now: min((now + 1) / warmup, max(0.0, (steps - now) / max(1, steps - warmup))))


def autocast_dtype(requested: str) -> torch.dtype | None:
    """The autocast dtype of --mixed-precision (`auto` resolved as every training command resolves it), or None for
    float32."""
    return AUTOCAST_DTYPES.get(resolve_mixed_precision(requested))


def train_student(config: AdaptConfig, encoder: Encoder, lists: TeacherLists, texts: list[str],
                  prefixes: dict[str, str]) -> int:
    """Train `encoder` in place on the teacher's lists, its queries and texts with `prefixes`, under
    --mixed-precision's autocast (fp16 with a gradient scaler); returns the steps taken."""
    torch.manual_seed(config.seed)
    steps, per_step = steps_of(config, len(lists.queries)), max(1, config.batch_size // config.list_size)
    optimizer = torch.optim.AdamW(encoder.model.parameters(), lr=config.learning_rate,
                                  weight_decay=config.weight_decay)
    scheduler = schedule(optimizer, steps, config.warmup_ratio)
    order = np.random.default_rng(config.seed).permutation(len(lists.queries))
    dtype = autocast_dtype(config.mixed_precision)
    scaler = torch.amp.GradScaler(encoder.device.type, enabled=dtype == torch.float16)
    precision = "" if dtype is None else f" in {AUTOCAST_NAMES[dtype]}"
    encoder.model.train()
    with progress(f"distilling the teacher's scores ({steps:,} steps{precision})", steps, "step") as bar:
        for now in range(steps):
            rows = np.take(order, range(now * per_step, (now + 1) * per_step), mode="wrap")
            with torch.autocast(encoder.device.type, dtype=dtype) if dtype else contextlib.nullcontext():
                logits = student_logits(encoder, [lists.queries[r] for r in rows],
                                        [texts[d] for r in rows for d in lists.documents[r]], config.max_length,
                                        prefixes)
            teacher = torch.from_numpy(lists.logits[rows]).to(logits.device)
            loss = distill_loss(config.distill_loss, logits.float(), teacher)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            if config.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(encoder.model.parameters(), config.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            bar.set_postfix(loss=f"{loss.item():.4f}")
            bar.update(1)
    encoder.model.eval()
    return steps


def distill(config: AdaptConfig, documents: list[Document], folder: Path, prefix: str, pooling: PoolingConfig,
            prefixes: dict[str, str]) -> tuple[int, Path]:
    """The distillation stage from the base (`config.model`), the teacher's lists and the student's training with the
    run's `prefixes` (side → text): (steps, the folder holding the student's encoder as a checkpoint names it, under
    `prefix`). A finished stage is reused on --resume."""
    target = folder / DISTILLED
    saved = target / MODEL_FILE
    student = Encoder.load(config.model, pooling=pooling.pooling, normalize=pooling.normalize,
                           max_length=config.max_length, backend=config.backend, quantize=config.quantize)
    if config.resume and saved.is_file():
        return steps_of(config, config.distill_queries), target
    lists = teacher_lists(config, student, documents, prefixes)
    steps = train_student(config, student, lists, [document.text for document in documents], prefixes)
    with atomic_path(saved) as temporary:
        save_file({prefix + name: tensor.detach().contiguous().cpu()
                   for name, tensor in student.model.state_dict().items()}, str(temporary))
    return steps, target

