"""`retromae adapt` from end to end: check the inputs, split off validation, score the base, train, guard, export.

Owns `adapt(config)`: the stages in order, each with one display (reading and splitting the corpus, scoring the base,
the training stage, the guard), the validation set's description (what it was estimated on, how many documents, at
which length), the budget sized from the corpus, the training stage's config (a `retromae pretrain` run in
`OUTPUT/training/`, its checkpoints the guard's candidates; or the distillation, `retromae.adaptation.distill`), the
export of the winner as `OUTPUT/encoder/` and `OUTPUT/sentence-transformer/` with the base's pooling and similarity,
naming as its prompts the prefixes the guard scored with (`finetuning.run.training_prefixes`: the base's prompts
unless --query-prefix/--passage-prefix say otherwise), and a model card naming the base, the objective, the averaging
and the guard's scores, `OUTPUT/guard.json`, and the closing verdict on standard output. Does not own the objective,
the loop or the scoring (`retromae.adaptation.guard`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retromae.adaptation.config import AdaptConfig
from retromae.adaptation.data import (
    base_pooling,
    check_language,
    read_documents,
    split_corpus,
    write_training_corpus,
    write_validation,
)
from retromae.adaptation.guard import (
    BOOTSTRAP_RESAMPLES,
    INTERVAL_LEVEL,
    METRIC,
    Candidate,
    Gain,
    run_guard,
    score,
    score_candidate,
    systems,
)
from retromae.adaptation.queries import validation_kind
from retromae.data.corpus import Document
from retromae.data.held_out import check_held_out
from retromae.data.ranking import ranked
from retromae.data.retrieval_sets import RetrievalSet, load_retrieval_set
from retromae.data.token_store import TokenStore
from retromae.data.training_groups import load_training_data
from retromae.evaluation.probe import sample_retrieval_set
from retromae.finetuning.run import FinetuneConfig, finetune, training_prefixes
from retromae.models.encoder import Encoder, PoolingConfig
from retromae.models.export import declared_max_length, export_encoder, export_sentence_transformer
from retromae.models.model_card import ADAPTED_TAG, card_tags, write_model_cards
from retromae.models.model_source import looks_local, resolve_model
from retromae.objectives import OBJECTIVES
from retromae.pretraining.config import PretrainConfig
from retromae.runtime.console import Result, Stages, given, notice, step
from retromae.runtime.io import write_text_atomic
from retromae.runtime.options import option, save_config, steps_from_passes
from retromae.runtime.run_folder import claim_folder, input_paths, mark_started, run_identity
from retromae.training.checkpoints import checkpoints_by_step

GUARD_FILE = "guard.json"
UNSEEN_FILE = "unseen-qrels.tsv"
CARD_TITLE = "An embedder adapted to a corpus by retromae adapt"
# How the verdict names the held-out queries of each kind (`retromae.adaptation.queries`).
KIND_NAMES = {"keywords": "keyword queries of held-out documents",
              "passage": "passage queries of held-out documents (a sentence taken out, the rest searched for)"}
ENCODE_BATCH = 64  # texts per forward pass while the validation set is encoded
OUTPUTS = ("encoder", "sentence-transformer", GUARD_FILE, UNSEEN_FILE, "data", "validation", "training", "finetuned",
           "config.json")


@dataclass(kw_only=True)
class StageConfig(PretrainConfig):
    """The training stage: `retromae pretrain`'s options plus the pooling the objective trains (the base's)."""

    pooling: str = option("cls", "the sentence vector's pooling (the base's)")
    normalize: bool = option(False, "whether the sentence vector is L2-normalised (the base's similarity)")


# The options `adapt` passes on to its training stage as they are: those both configs declare.
STAGE_OPTIONS = tuple(sorted({field.name for field in dataclasses.fields(StageConfig)}
                             & {field.name for field in dataclasses.fields(AdaptConfig)}))


@dataclass
class Prepared:
    """What the stages read: the validation set and how it was made, the training documents, their blocks."""

    validation: RetrievalSet
    description: str
    training: list[Document]
    blocks: int


def adapt(config: AdaptConfig | None = None, /, **options: Any) -> Path:
    """Adapt `config.model` to `config.corpus` as `config` (or `AdaptConfig(**options)`) says; returns the output
    folder, whose encoder/ is the base or the adapted candidate that beat it on the validation set."""
    config = config if config is not None else AdaptConfig(**options)
    check_held_out(config)  # --validation is never trained on (the command line checked it before torch)
    output = Path(config.output)
    pooling = base_pooling(config.model, config.pooling, config.normalize)
    again = adapted_before(config.model)  # read before anything is written
    claim_folder(output, "adapt", run_identity(config), OUTPUTS, resume=config.resume, overwrite=config.overwrite,
                 inputs=input_paths(config), started=False)
    save_config(config, output / "config.json")
    stages = Stages(4 if config.train is None else 5)
    stages.start("reading the corpus and holding out validation")
    encoder = Encoder.load(config.model, pooling=pooling.pooling, normalize=pooling.normalize,  # its own length
                           backend=config.backend, quantize=config.quantize)
    data = prepare_data(config, encoder, output)
    stages.start(f"scoring the base on {len(data.validation.queries):,} validation queries")
    prefixes = training_prefixes(config, encoder, encoder)
    base = Candidate(0, 1.0)
    with step(f"{METRIC} of the base"):
        score_candidate(base, encoder, data.validation, ENCODE_BATCH, prefixes)
    stages.start("adapting")
    prefix = f"encoder.{encoder.model.base_model_prefix}."
    mark_started(output)
    steps, states = train_stage(config, output, data, pooling, prefix, prefixes)
    stages.start("guarding: scoring the adapted encoder against the base")
    best, scored, state = run_guard(encoder, data.validation, states, prefix, config.mix, base, ENCODE_BATCH,
                                    config.seed, prefixes)
    encoder.model.load_state_dict(state)
    export(encoder, config, output, pooling.normalize, prefixes)
    record = exported_record(config, output, data, best, scored, steps, again)
    report = (summary(best, scored, data.description, labelled=config.validation is not None,
                      adapted_before=record["adapted_before"]) + "\n" + next_step(config, record["systems"]))
    if config.train is not None:
        stages.start(f"fine-tuning the adapted encoder on {config.train}")
        record["finetuned"] = finetune_adapted(config, output, data.validation, prefixes)
        report += f"\nfine-tuned on {given(config.train)}: {record['finetuned']:.4f} on the same validation set"
    write_text_atomic(output / GUARD_FILE, json.dumps(record, indent=2) + "\n")
    return Result(output, (report,))  # the verdict is a result: standard output (docs/output.md)


def exported_record(config: AdaptConfig, output: Path, data: Prepared, best: Candidate, scored: list[Candidate],
                    steps: int, again: bool) -> dict:
    """guard.json's record of the export (`scored`: the guard's candidates, the base first), whose cards it writes:
    tagged ADAPTED_TAG unless the base was kept."""
    base = scored[0]
    record = guard_record(config, output, best, scored, steps, data.description)
    record["systems"] = systems(data.validation, base, best)
    record["adapted_before"] = again
    write_model_cards([output / "encoder", output / "sentence-transformer"], CARD_TITLE,
                      adapt_facts(config, record, best), tags=(ADAPTED_TAG,) if best is not base else ())
    return record


def train_stage(config: AdaptConfig, output: Path, data: Prepared, pooling: PoolingConfig, prefix: str,
                prefixes: dict[str, str]) -> tuple[int, dict[int, Path]]:
    """The adaptation: distillation (its queries and passages with `prefixes`), or a `retromae pretrain` run (its
    blocks of documents with none: the objectives read text, not passages as they are searched); returns its steps
    and the guard's candidate states (checkpoint folders by step: the last, or every one with --candidates all)."""
    if config.objective == "distill":
        from retromae.adaptation.distill import distill  # torch's training loop: only once the inputs have passed

        steps, folder = distill(config, data.training, output / "training", prefix, pooling, prefixes)
        return steps, {steps: folder}
    stage = stage_config(config, output, data.blocks, pooling)
    from retromae.pretraining.run import pretrain  # the training stack: only once the inputs have passed their checks

    pretrain(stage)
    found = dict(checkpoints_by_step(output / "training"))
    last = max(found)
    return stage.max_steps, (found if config.candidates == "all" else {last: found[last]})


def guard_record(config: AdaptConfig, output: Path, best: Candidate, scored: list[Candidate], steps: int,
                 description: str) -> dict[str, Any]:
    """guard.json: the metric, the validation set, the base's and every candidate's score, the chosen one, and each
    candidate's gain over the base, in points and relative, with their intervals."""
    base = scored[0]
    return {"metric": METRIC, "validation": config.validation or str(output / "validation"),
            "validation_set": description, "chosen": best.name, "base": base.score, "steps": steps,
            "interval_level": INTERVAL_LEVEL, "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
            **gain_fields(best.gain),
            "candidates": [{"name": c.name, "step": c.step, "weight": c.weight, METRIC: c.score,
                            **gain_fields(c.gain), "gain": c.score - base.score} for c in scored]}


def gain_fields(gain: Gain | None) -> dict[str, Any]:
    """A gain's intervals as guard.json keeps them (None for the base, or for the relative one where undefined)."""
    return {"interval": None if gain is None else list(gain.interval),
            "relative_gain": None if gain is None else gain.relative,
            "relative_interval": None if gain is None or gain.relative_interval is None
            else list(gain.relative_interval)}


def finetune_adapted(config: AdaptConfig, output: Path, validation: RetrievalSet, prefixes: dict[str, str]) -> float:
    """`retromae finetune` of OUTPUT/encoder on --train into OUTPUT/finetuned/ (its defaults; the adapted encoder's
    pooling and similarity; the run's `prefixes`); returns the fine-tuned encoder's score on the validation set."""
    tuned = finetune(FinetuneConfig(model=str(output / "encoder"), data=config.train, split=config.train_split,
                                    output=str(output / "finetuned"), seed=config.seed, resume=config.resume,
                                    overwrite=config.overwrite, mixed_precision=config.mixed_precision,
                                    query_prefix=prefixes["query"], passage_prefix=prefixes["passage"]))
    return score(Encoder.load(tuned / "encoder", backend=config.backend, quantize=config.quantize), validation,
                 ENCODE_BATCH, prefixes)[0]


def prepare_data(config: AdaptConfig, encoder: Encoder, output: Path) -> Prepared:
    """The validation set (--validation's sample, or queries of held-out documents of a kind the objective does not
    train on, written to OUTPUT/validation/) and its description, the training corpus (OUTPUT/data/train.jsonl) and
    its blocks."""
    where = ", ".join(config.corpus)
    if config.train is not None:
        with step(f"reading {config.train} (--train), before the long stages"):
            load_training_data(config.train, config.train_split)  # a bad file is named now, not after adapting
    with step(f"reading {where}"):
        documents = read_documents(config.corpus)
        check_language(encoder.tokenizer, documents, config.model, where)
        if config.validation is not None:
            validation, description = labelled_validation(config, output)
            training = documents
        else:
            kind = validation_kind(config.objective)
            split = split_corpus(documents, config.validation_queries, config.seed, where, kind)
            write_validation(split, config.validation_documents, config.seed, output / "validation")
            validation = load_retrieval_set(output / "validation", "test")
            training = split.training
            description = (f"{len(validation.queries):,} {KIND_NAMES[kind]}, "
                           f"{searched(validation, len(documents))}")
        write_training_corpus(training, output / "data" / "train.jsonl")
    description += f", at {encoder.max_length} tokens"
    if config.objective == "distill":
        return Prepared(validation, description, training, 0)
    store = TokenStore.build_or_load([str(output / "data" / "train.jsonl")], encoder.tokenizer, config.max_length,
                                     cache_dir=Path(config.cache_dir) if config.cache_dir else None)
    return Prepared(validation, description, training, len(store))


def searched(validation: RetrievalSet, corpus: int) -> str:
    """How many documents each validation query was searched among: all of the corpus, or a sample."""
    size = len(validation.corpus)
    return (f"searched among all {size:,} documents" if size >= corpus else
            f"searched among a sample of {size:,} of the {corpus:,} documents (--validation-documents)")


def labelled_validation(config: AdaptConfig, output: Path) -> tuple[RetrievalSet, str]:
    """The user's labelled queries the guard scores (all of them up to --validation-queries, or a seeded
    --validation-fraction, the others written to OUTPUT/unseen-qrels.tsv) and their description; a warning when
    they are a test split."""
    full = load_retrieval_set(Path(config.validation), config.validation_split)
    if config.validation_split == "test":
        notice(f"retromae: warning: --validation {config.validation} --validation-split test: the guard then chooses "
               "the model on the queries it will be judged on, which flatters it; judge it on other queries "
               "(--validation-fraction keeps some aside), or give another split")
    wanted = config.validation_queries
    if config.validation_fraction is not None:
        wanted = max(1, round(config.validation_fraction * len(full.queries)))
    validation = sample_retrieval_set(full, wanted, config.validation_documents, config.seed)
    if config.validation_fraction is not None:
        unseen = sorted(set(full.qrels) - set(validation.qrels))
        rows = ["query-id\tcorpus-id\tscore"] + [f"{qid}\t{doc}\t{grade}" for qid in unseen
                                                 for doc, grade in full.qrels[qid].items()]
        write_text_atomic(output / UNSEEN_FILE, "\n".join(rows) + "\n")
    description = (f"{len(validation.queries):,} of your labelled queries ({config.validation}, split "
                   f"{config.validation_split}), {searched(validation, len(full.corpus))}")
    return validation, description


def budget(config: AdaptConfig, blocks: int) -> int:
    """--max-steps, else --passes over the training blocks at --batch-size, at most --step-cap (at least 2 steps:
    one to warm the heads, one to move the encoder)."""
    if config.max_steps is not None:
        return config.max_steps
    return max(2, steps_from_passes("--passes", config.passes, blocks, config.batch_size, "blocks",
                                    cap=config.step_cap))


def stage_config(config: AdaptConfig, output: Path, blocks: int, pooling: PoolingConfig) -> StageConfig:
    """The `retromae pretrain` run of the training stage, in OUTPUT/training/: the heads warmed for --head-warmup
    of the steps before the encoder moves, a checkpoint for each of --checkpoints: all kept when the guard scores
    them (--candidates all), else only the latest, which is what --resume and the guard read."""
    steps = budget(config, blocks)
    headless = not OBJECTIVES[config.objective].trains_a_head()  # no fresh head to warm: the encoder trains at once
    warmup = 0 if headless else min(steps - 1, round(config.head_warmup * steps))
    # every option the stage shares with `adapt` by name; `decoding` left to the objective's default when unset
    shared = {name: getattr(config, name) for name in STAGE_OPTIONS}
    if config.decoding is None:
        del shared["decoding"]
    own = {"corpus": [str(output / "data" / "train.jsonl")], "output": str(output / "training"),
           "pooling": pooling.pooling, "normalize": pooling.normalize, "max_steps": steps,
           "freeze_encoder_steps": warmup, "save_every": math.ceil(steps / config.checkpoints),
           "keep_checkpoints": config.checkpoints + 1 if config.candidates == "all" else 1}
    return StageConfig(**{**shared, **own})


def export(encoder: Encoder, config: AdaptConfig, output: Path, normalize: bool, prefixes: dict[str, str]) -> None:
    """OUTPUT/encoder/ and OUTPUT/sentence-transformer/ of the encoder as it now is, with the base's pooling,
    similarity and declared input length, naming as its prompts the run's `prefixes`, which the guard scored the base
    and every candidate with (`guard.score_candidate`), so that `retromae evaluate` of it gives the guard's figure."""
    export_encoder(encoder.model, encoder.tokenizer, output / "encoder", pooling=encoder.pooling,
                   normalize=normalize, max_length=declared_max_length(config.model), prompts=prefixes)
    export_sentence_transformer(output / "encoder", output / "sentence-transformer", normalize=normalize)


def summary(best: Candidate, scored: list[Candidate], description: str, labelled: bool,
            adapted_before: bool = False) -> str:
    """Every candidate's score, its gain over the base (in points and as a share of the base's score) and the interval
    of that gain, then the verdict against the base in plain words, saying what the figures were estimated on: the
    user's labelled queries (`labelled`, --validation) or queries made from the corpus, whose gain tells less, and
    less still where the base is an `adapt` export (`adapted_before`)."""
    base = scored[0]
    level = f"{INTERVAL_LEVEL:.0%}"
    lines = [f"validation {METRIC}, estimated on {estimated_on(labelled)} ({description}):",
             f"  {'candidate':<45} {METRIC:>8} {'gain':>8} {'relative':>9}  {level} interval of the gain"]
    for candidate in scored:
        gain = "" if candidate.gain is None else (f"{candidate.gain.absolute:+8.4f} {share(candidate.gain.relative):>9}"
                                                  f"  {points(candidate.gain.interval)}")
        lines.append(f"  {candidate.name:<45} {candidate.score:8.4f} {gain}".rstrip())
    if best is not base:
        lines.append(f"exported {best.name}: {best.gain.absolute:+.4f} over the base ({base.score:.4f}, "
                     f"{share(best.gain.relative)} of it), {level} interval {points(best.gain.interval)}, estimated on "
                     f"{estimated_on(labelled)}")
        if not labelled:
            lines.append(SECOND_ROUND if adapted_before else WHAT_CARRIES)
        return "\n".join(lines)
    challenger = max(scored[1:], key=lambda c: c.score, default=None)
    why = ("" if challenger is None or challenger.gain is None else
           f" ({challenger.name}: {challenger.gain.absolute:+.4f}, its {level} interval "
           f"{points(challenger.gain.interval)} reaches the base)")
    lines.append(f"no candidate beat the base beyond the validation's noise{why}: exported the base unchanged")
    return "\n".join(lines)


def share(relative: float | None) -> str:
    """A relative gain as a signed percentage ("n/a" where the base scores 0)."""
    return "n/a" if relative is None else f"{relative:+.1%}"


def points(interval: tuple[float, float]) -> str:
    """An interval of a gain in METRIC points, "[+0.0052, +0.0313]"."""
    return f"[{interval[0]:+.4f}, {interval[1]:+.4f}]"


# What a user can run next, by the guard's `systems` names: in words, and the commands that make it.
NEXT_STEPS = {
    "adapted+bm25": ("the adapted model in a hybrid with BM25",
                     "retromae encode --model {output}/sentence-transformer --corpus {corpus} --output emb && "
                     "retromae index --embeddings emb --hybrid --output idx"),
    "adapted": ("the adapted model alone",
                "retromae encode --model {output}/sentence-transformer --corpus {corpus} --output emb && "
                "retromae index --embeddings emb --output idx"),
    "base+bm25": ("the base in a hybrid with BM25",
                  "retromae encode --model {model} --corpus {corpus} --output emb && "
                  "retromae index --embeddings emb --hybrid --output idx"),
    "base": ("the base alone", "retromae encode --model {model} --corpus {corpus} --output emb && "
                               "retromae index --embeddings emb --output idx"),
    "bm25": ("BM25 alone", "retromae bm25 --corpus {corpus} --queries YOUR_QUERIES --output bm25.trec"),
}


def next_step(config: AdaptConfig, scores: dict[str, float]) -> str:
    """The closing lines: every system a user can run next, best first, by its score on the same held-out queries,
    and the commands of the best."""
    order = ranked(scores)
    words, command = NEXT_STEPS[order[0]]
    ranking = "; ".join(f"{NEXT_STEPS[name][0]} {scores[name]:.4f}" for name in order)
    return (f"best next step, by {METRIC} on the same held-out queries: {words} ({ranking})\n  "
            + command.format(output=given(config.output), corpus=given(config.corpus[0]), model=given(config.model)))


def estimated_on(labelled: bool) -> str:
    """The words saying where the guard's figures come from: the user's labelled queries or the corpus."""
    return "your labelled queries" if labelled else "queries made from your corpus"


# What a gain on queries made from the corpus says about a user's own queries (docs/RESULTS.md section 10.9): on every
# development and trial run that adapted a pre-trained embedder and exported, the real gain was above 0, but from a
# fifth to over three times this figure.
WHAT_CARRIES = ("  on your own queries expect a gain, not this figure: queries made from a corpus tell whether the "
                "candidate gains, not how much (on the collections tried the real gain ranged from a small part of it "
                "to several times it); for a figure to take at its word, give --validation a few hundred of your "
                "labelled queries")


# The same on a base that `adapt` exported (docs/RESULTS.md section 10.10): on the second rounds tried the guard
# exported two candidates, and both lost on the real queries.
SECOND_ROUND = ("  this base is an export of retromae adapt (its model card says so): on such a second round queries "
                "made from the corpus did not tell even whether the candidate gains (both candidates exported on the "
                "collections tried lost on real queries); before using it, compare it with the base on --validation, "
                "a few hundred of your labelled queries")


def adapted_before(model: str) -> bool:
    """Whether the local folder `model` names is a `retromae adapt` export, by its model card's tag (hub models: no)."""
    source = resolve_model(model)
    return looks_local(source.folder) and ADAPTED_TAG in card_tags(source.folder)


def adapt_facts(config: AdaptConfig, record: dict[str, Any], best: Candidate) -> dict[str, str]:
    """The model card's facts of an adapt run: the base, the objective, the averaging, the guard's scores."""
    chosen = ("the base, unchanged: no candidate beat it" if best.step == 0 else
              f"the training's step {best.step} averaged with the base at weight {best.weight:g} "
              f"(θ = {best.weight:g}·θ_adapted + {1 - best.weight:g}·θ_base)")
    interval = record["interval"]
    scores = f"base {record['base']:.4f}; " + "; ".join(
        f"{c['name']} {c[METRIC]:.4f}" for c in record["candidates"][1:])
    return {"Base model": str(config.model),
            "Training": f"`retromae adapt`, objective {config.objective}"
                        + (f" (teacher: {config.teacher or 'BM25 fused with the base'}, loss {config.distill_loss})"
                           if config.objective == "distill" else "") + f", {record['steps']:,} steps, seed "
                        f"{config.seed}, peak learning rate {config.learning_rate:g}",
            "Training data": ", ".join(config.corpus) + " (no labels)",
            "Exported": chosen,
            "Guard": f"{METRIC} on {record['validation_set']}: {scores}"
                     + ("" if interval is None else f"; {INTERVAL_LEVEL:.0%} interval of the gain {points(interval)}, "
                                                    f"a gain of {share(record['relative_gain'])} of the base's")
                     + ("" if interval is None or config.validation is not None else
                        " (queries made from the corpus, on a base adapted before: they did not tell whether it gains "
                        "on real queries)" if record["adapted_before"] else
                        " (queries made from the corpus: they tell whether it gains on real queries, not how much)")}
