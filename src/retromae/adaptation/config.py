"""The options of `retromae adapt`, declared apart from the run so that parsing them imports no torch.

Owns `AdaptConfig`: the base, the corpus, the validation set, the recipe (objective, budget, head warm-up, weight
averaging with the base) and the guard's candidates. The training loop's options come from `TrainingConfig`; some of
its defaults are the adaptation recipe's (learning rate, batch). Does not own the run (`retromae.adaptation.run`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from retromae.data.held_out import HeldOut, Queries
from retromae.data.retrieval_sets import check_split
from retromae.models.encoder_config import POOLINGS, BackendOptions, prefix_option
from retromae.runtime.io import check_folder_option
from retromae.runtime.options import (
    FRACTION,
    OPEN_UNIT,
    POSITIVE,
    STEPS,
    Domain,
    acts_with,
    acts_with_folder,
    at_least,
    option,
    require,
)
from retromae.training.config import TrainingConfig

# Objectives `adapt` trains with; each trains the encoder under the base's pooling (mlm: no sentence vector at all).
PRETRAINING_OBJECTIVES = ("tsdae", "cropping", "retromae", "retromae+contrastive", "mlm")
ADAPT_OBJECTIVES = (*PRETRAINING_OBJECTIVES, "distill")
DISTILL_LOSSES = ("kl", "margin-mse")
DISTILL_KINDS = ("sentence", "keywords", "title")  # the pseudo-queries `adaptation.queries` makes for the distillation
RETROMAE_FAMILY = ("retromae", "retromae+contrastive")  # the objectives that read --decoding


@dataclass(kw_only=True)
class AdaptConfig(TrainingConfig, BackendOptions):
    """Options of `retromae adapt`; defaults are the recipe that gained on every collection and seed measured
    (SciFact, NPL, Debian: docs/RESULTS.md section 10.3; docs/guide.md, "Adapting an embedder to your corpus").
    `--backend` and `--quantize` run its encoding passes (the teacher's vectors, the guard's scores); the training
    is torch's."""
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"corpus": "documents", "validation": ("retrieval set", "validation_split"),
                     "train": ("training data", "train_split")}

    model: str = option(help="the embedder to adapt: a sentence-transformers folder, our exported encoder, or a "
                             "Hugging Face encoder (folder or hub name); its pooling and similarity are kept",
                        reads="model")
    corpus: list[str] = option(help="the corpus to adapt to (.txt, .jsonl, .parquet, BEIR folder, hf:NAME[:CONFIG]); "
                                    "no labels needed", reads="path")
    validation: str | None = option(None, "a BEIR (or MS MARCO) folder of your own labelled queries that the guard "
                                          "scores candidates on; default: queries of documents held out of "
                                          "training, of a kind the objective does not train on: keywords (a few of "
                                          "each one's highest tf-idf words, the document searched for), or for "
                                          "distill a passage taken out of it (the rest searched for)", reads="path")
    validation_split: str = option("test", "qrels split of --validation (a test split warns: the model would then "
                                           "be chosen on the queries it is judged on)", check=check_split)
    validation_queries: int = option(1000, "the guard scores at most this many queries (held-out documents "
                                           "without --validation: at most this many, and a tenth of the corpus at "
                                           "most): the more, the narrower the interval of a candidate's gain", POSITIVE)
    validation_fraction: float | None = option(None, "with --validation: the share of its queries the guard scores "
                                                     "(seeded); the others are written to OUTPUT/unseen-qrels.tsv "
                                                     "for a judgement the choice never saw", OPEN_UNIT)
    validation_documents: int = option(20000, "documents searched per query: the whole corpus when it has at most "
                                              "this many, else the relevant ones and a seeded sample of others, "
                                              "this many in all (said in the verdict)", POSITIVE)
    pooling: str | None = option(None, "the base's pooling; needed when its folder declares none (no "
                                       "sentence-transformers modules.json / 1_Pooling, no retromae_encoder.json); "
                                       "default: what the folder declares", choices=POOLINGS)
    normalize: bool | None = option(None, "with --pooling: whether the base's vectors are L2-normalised (compared by "
                                          "cosine); else what its folder declares")
    objective: str = option("distill", "adaptation objective: distill (default: pseudo-queries of the corpus, "
                                    "candidates from BM25 and the base, the student trained on the teacher's "
                                    "scores: the fused hybrid, or --teacher), cropping (InfoNCE between two crops "
                                    "of a document in the base's cosine similarity, COCO-DR-style), tsdae "
                                    "(denoising auto-encoder through the sentence vector, GPL's +1.4), retromae "
                                    "(RetroMAE, its decoder conditioned on the base's pooled vector), "
                                    "retromae+contrastive (that plus InfoNCE between two spans of a document in the "
                                    "base's cosine similarity, the unified learner's stage 2) or mlm (masked "
                                    "language modelling)", choices=ADAPT_OBJECTIVES)
    decoder_layers: int | None = option(None, "decoder layers of tsdae and the retromae objectives (default 1; "
                                              "more only with --decoding basic)", POSITIVE)
    decoding: str | None = option(None, "RetroMAE's decoding (retromae, retromae+contrastive): enhanced (default; "
                                        "exactly one decoder layer) or basic", choices=("enhanced", "basic"))
    max_length: int = option(128, "tokens per training block (distill: per training text); the guard encodes at "
                                  "the base's own max length, as the model will be used", at_least(8))
    teacher: str | None = option(None, "distill: a cross-encoder (a `retromae train-reranker` output, or a Hugging "
                                       "Face sequence classifier) scoring the candidates; default: the hybrid, BM25 "
                                       "fused with the base (convex, the base's share 0.7)", reads="model")
    distill_queries: int = option(2000, "distill: pseudo-queries made from the training documents, of each of "
                                        "--distill-kinds in turn", at_least(2))
    distill_kinds: list[str] = option(["sentence", "keywords"], "distill: the kinds of pseudo-query: sentence (one "
                                                                "of the document's sentences, or a 6-12-word window "
                                                                "in text without sentence marks), keywords (3-6 of "
                                                                "its highest tf-idf words), title (its title, where "
                                                                "the corpus gives one; on SciFact it cost 0.019 "
                                                                "NDCG@10 on one seed, added 0.005 on another: "
                                                                "docs/RESULTS.md section 10.4)",
                                      choices=DISTILL_KINDS)
    distill_candidates: int = option(30, "distill: documents each side (BM25, the base) retrieves per query, the "
                                         "teacher's candidates", at_least(2))
    list_size: int = option(8, "distill: documents per query in the loss: the teacher's top half, the rest drawn "
                               "from its other candidates", at_least(2))
    distill_loss: str = option("kl", "distill: kl (listwise KL divergence from the teacher's distribution at a "
                                     "temperature matched to the student's scale) or margin-mse (GPL's: the "
                                     "teacher's first against each other, margins matched in scale)",
                               choices=DISTILL_LOSSES)
    passes: float = option(1.0, "without --max-steps: passes over the training blocks, at --batch-size, capped by "
                                "--step-cap", POSITIVE)
    step_cap: int = option(2000, "without --max-steps: the most steps the budget from --passes may reach", STEPS)
    max_steps: int | None = option(None, "optimiser steps (default: from --passes and --step-cap)", STEPS)
    batch_size: int = option(64, "examples per step (cropping: 63 other documents' crops as negatives; TSDAE's "
                                 "reference batch is 8)", POSITIVE)
    learning_rate: float = option(3e-5, "peak learning rate of the encoder", POSITIVE)
    head_learning_rate: float = option(1e-4, "peak learning rate of the fresh heads (decoder, MLM head)",
                                       POSITIVE)
    head_warmup: float = option(0.1, "share of the steps that train only the fresh heads before the encoder moves",
                                FRACTION)
    checkpoints: int = option(3, "checkpoints saved, evenly spaced over the budget (the last at the end): where "
                                 "--resume continues, and the guard's candidates with --candidates all (with "
                                 "--candidates last only the latest is kept)", POSITIVE)
    candidates: str = option("last", "the checkpoints the guard scores, each at each --mix weight: last (the end of "
                                     "training) or all; more candidates let a biased validation set pick noise",
                             choices=("last", "all"))
    mix: list[float] = option([0.5], "weights of the adapted encoder in its average with the base "
                                     "(1: the adapted one as is; 0.5: half and half, WiSE-FT's); the guard scores "
                                     "each candidate checkpoint at each weight", Domain(0, 1, low_open=True))
    query_prefix: str | None = prefix_option(
        "query", "text put before every query the run encodes: the pseudo-queries the distillation's teacher scores "
        "and its student trains on, the guard's validation queries, --train's, and named the export's query prompt")
    passage_prefix: str | None = prefix_option(
        "passage", "text put before every passage the run encodes as one (the distillation's candidates, the guard's "
        "documents, --train's), and named the export's document prompt",
        "; the pre-training objectives' blocks get none")
    train: str | None = option(None, "few labels: after adapting, fine-tune the exported encoder on this BEIR (or "
                                     "MS MARCO) folder's --train-split qrels, or a training file, with `retromae "
                                     "finetune`'s defaults, into OUTPUT/finetuned/", reads="path")
    train_split: str = option("train", "qrels split of a --train folder", check=check_split)
    cache_dir: str | None = option(None, "token store cache folder (default: $RETROMAE_CACHE or ~/.cache/retromae)",
                                    check=check_folder_option)
    # --validation (the guard's queries and the unseen ones) is never what --train fine-tunes on (`data.held_out`)
    HELD_OUT: ClassVar[tuple[HeldOut, ...]] = (
        HeldOut(Queries("validation", "validation_split"), Queries("train", "train_split"),
                "the validation queries (the guard's, and the unseen ones of --validation-fraction)"),)
    # Each option that acts only with another: the distillation's with its objective, a split with its folder.
    ACTS = {**{name: acts_with("objective", "distill", off="cropping")
               for name in ("teacher", "distill_queries", "distill_kinds", "distill_candidates", "list_size",
                            "distill_loss")},
            **{name: acts_with("validation", on="x", off=None) for name in ("validation_split", "validation_fraction")},
            "train_split": acts_with_folder("train")}
    # Set from --checkpoints, so not options of this command (ClassVar drops the inherited fields).
    save_every: ClassVar[int] = 0
    keep_checkpoints: ClassVar[int] = 1

    def makes_token_store(self) -> bool:
        """Whether the run tokenises its training corpus into a token store (`data.token_store`): all but distill."""
        return self.objective != "distill"

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.corpus) > 0, "corpus", "give at least one corpus file")
        require(len(self.distill_kinds) > 0 and len(set(self.distill_kinds)) == len(self.distill_kinds),
                "distill_kinds", "give each kind once, at least one")
        require(self.list_size <= 2 * self.distill_candidates, "list_size",
                "must lie between 2 and twice --distill-candidates")
        require(self.normalize is None or self.pooling is not None, "normalize",
                "only with --pooling (a folder that declares its pooling declares its normalisation too)")
        require(len(self.mix) > 0, "mix", "give at least one weight")
        require(self.decoding is None or self.objective in RETROMAE_FAMILY, "decoding",
                f"only with --objective {' or '.join(RETROMAE_FAMILY)}")
