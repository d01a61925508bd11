#!/usr/bin/env bash
# Experiment: when does RetroMAE overtake MLM and no pre-training? Zero-shot retrieval probes while pre-training.
# Every variant starts from the same random initialisation and pre-trains with `--probe` (and `--probe-sts` where an
# STS file is given): NDCG@10 / Recall@100 of the encoder's [CLS] vector on a seeded sample of the probe set's
# queries, at step 0 (the random initialisation, i.e. no pre-training), every PROBE_EVERY steps and at the end.
# `retromae report` then plots the probe curves against steps and tokens (report/probe-curves.png) and tables the
# step (tokens) from which each run stays above its step 0 and above each other run (report/report.md).
# Usage: recipes/crossover.sh [RUNS_DIR]   (from the repository root)
#   SCALE=cpu (default): the quickstart's data, the standard library's docstrings (built offline into RUNS/data;
#     pre-training reads its corpus, the probe its test queries), the quickstart's initial model (a 2,000-token
#     WordPiece vocabulary trained on it, a 2 × 128 BERT, seed 42), 2,000 steps of 32 × 64-token blocks, probes of
#     300 test queries against the whole corpus every 250 steps; about 15 minutes on 2 idle CPU cores.
#   SCALE=gpu: the GPU-scale comparison (../shared/measurements/h100-2026-11-22): 4 × 256 from `retromae
#     init-model` around BERT's uncased vocabulary, ../shared/data/pretrain, 3,000 steps of 128 × 128-token blocks,
#     bf16, probes on SciFact test and STS-B test every 100 steps.
# Any size can be overridden from the environment (HIDDEN, LAYERS, LENGTH, BATCH, STEPS, LR, LOG_EVERY, PROBE_EVERY,
# PROBE_QUERIES, PROBE_DOCUMENTS, PROBE, PROBE_STS, CORPUS, ...); PROBE_EVERY must be a multiple of LOG_EVERY.
source "$(dirname "$0")/lib.sh"
SCALE=${SCALE:-cpu}
RUNS=${1:-runs/crossover-$SCALE}
mkdir -p "$RUNS"

if [ "$SCALE" = gpu ]; then
  HIDDEN=${HIDDEN:-256} LAYERS=${LAYERS:-4} LENGTH=${LENGTH:-128} BATCH=${BATCH:-128} STEPS=${STEPS:-3000}
  LR=${LR:-1e-3} LOG_EVERY=${LOG_EVERY:-50} PROBE_EVERY=${PROBE_EVERY:-100} PRECISION=${PRECISION:-bf16}
  read -r -a CORPUS <<< "${CORPUS:-$DATA/pretrain/nltk-english.jsonl $DATA/pretrain/python-docs.jsonl}"
  PROBE=${PROBE:-$SCIFACT} PROBE_STS=${PROBE_STS:-$STSB/sts-test.csv}
  INIT=$RUNS/initial-model
  [ -f "$INIT/config.json" ] || $PY -m retromae init-model --tokenizer "${TOKENIZER:-$(minilm_path)}" \
    --output "$INIT" --hidden-size "$HIDDEN" --layers "$LAYERS"
else
  HIDDEN=${HIDDEN:-128} LAYERS=${LAYERS:-2} LENGTH=${LENGTH:-64} BATCH=${BATCH:-32} STEPS=${STEPS:-2000}
  LR=${LR:-2e-3} LOG_EVERY=${LOG_EVERY:-50} PROBE_EVERY=${PROBE_EVERY:-250} PRECISION=${PRECISION:-no} VOCAB=${VOCAB:-2000}
  PROBE_QUERIES=${PROBE_QUERIES:-300} PROBE_DOCUMENTS=${PROBE_DOCUMENTS:-5000}
  PROBE=${PROBE:-$RUNS/data} PROBE_STS=${PROBE_STS:-}
  CORPUS=("$PROBE/corpus.jsonl")
  INIT=$RUNS/initial-model
  [ -f "$PROBE/corpus.jsonl" ] || $PY -c "import sys; from pathlib import Path
from retromae.data.stdlib_docs import build_stdlib_retrieval_set
print(build_stdlib_retrieval_set(Path(sys.argv[1])))" "$PROBE"
  [ -f "$INIT/config.json" ] || $PY -c "import dataclasses, sys; from pathlib import Path
from retromae.quickstart import initial_model
from retromae.quickstart_config import PRESETS
budget = dataclasses.replace(PRESETS['cpu'], vocab_size=int(sys.argv[2]), hidden_size=int(sys.argv[4]),
                             layers=int(sys.argv[5]), max_length=int(sys.argv[6]))
initial_model([sys.argv[1]], budget, Path(sys.argv[3]), seed=42)
" "${CORPUS[0]}" "$VOCAB" "$INIT" "$HIDDEN" "$LAYERS" "$LENGTH"
fi
PROBE_OPTIONS=(--probe "$PROBE" --probe-every "$PROBE_EVERY" --probe-queries "${PROBE_QUERIES:-200}"
               --probe-documents "${PROBE_DOCUMENTS:-5000}" --keep-best-probe)
[ -n "$PROBE_STS" ] && PROBE_OPTIONS+=(--probe-sts "$PROBE_STS")

variant() {  # variant NAME OBJECTIVE_OPTIONS...: pre-train from INIT with probes into RUNS/NAME/pretrain
  pretrain_variant "$RUNS/$1" --model "$INIT" --corpus "${CORPUS[@]}" --max-length "$LENGTH" --batch-size "$BATCH" \
    --max-steps "$STEPS" --learning-rate "$LR" --warmup-ratio 0.05 --log-every "$LOG_EVERY" --save-every 0 \
    --mixed-precision "$PRECISION" --cache-dir "$RUNS/cache" "${PROBE_OPTIONS[@]}" "${@:2}"
}

variant mlm --objective mlm --encoder-mask-ratio 0.15
variant retromae --objective retromae --decoding enhanced

$PY -m retromae report --overwrite --variants "$RUNS"/{mlm,retromae} --output "$RUNS/report" \
  --title "Zero-shot retrieval probes while pre-training ($SCALE scale)"
