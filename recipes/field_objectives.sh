#!/usr/bin/env bash
# Experiment: every pre-training objective of the field from one initialisation under one budget, over seeds.
# Variants: none (no pre-training), mlm, seed, retromae basic and enhanced, dupmae, condenser, cocondenser,
# contriever, simcse (unsupervised) and contrastive (spans); and the controls of Contriever's mean pooling, NAME-mean:
# variant NAME's encoder (none: the initial model) fine-tuned and scored with mean pooling instead of [CLS], run after
# the variants. Per seed, every variant starts from the same initial model, pre-trains for STEPS steps of the same
# number of encoder rows (BATCH blocks, or BATCH/2 documents with two views each for the pair objectives and SimCSE's
# two dropout views), probes zero-shot retrieval while it trains (--probe), and is then scored zero-shot on the test
# split (eval/zero-shot.json), fine-tuned the same way on the train split (in-batch negatives, the pooling its
# pre-training trained: mean for contriever, CLS otherwise) and scored again (eval/test.json: NDCG@10, Recall@100) and
# on STS-B test (eval/stsb.json: Spearman).
# `retromae report` tables each seed (RUNS/report-seed-S); recipes/seeds_table.py gathers the seeds into
# RUNS/report/seeds.md and seeds.png (mean and min..max per variant and metric).
# Usage: recipes/field_objectives.sh [RUNS_DIR]   (from the repository root; one command, resumable)
#   SCALE=cpu (default): the quickstart's CPU preset (the scale at which RetroMAE's [CLS] leaves the unigram
#     plateau): the standard library's docstrings (built offline into RUNS/data), the quickstart's initial model
#     (2,000-token WordPiece, 2 x 128 BERT, seed 42), 1,200 steps of 32 x 64-token rows at 2e-3, 3 fine-tuning
#     epochs; SEEDS="1 2 3". About 11 variants x 3 seeds x ~6 minutes on 2 idle CPU cores, plus the 2 controls.
#   SCALE=gpu: the quickstart's cuda preset (8,000-token vocabulary, 4 x 256, 2,000 steps of 128 x 128 tokens at 1e-3,
#     bf16, 4 fine-tuning epochs), PARALLEL variants at once on one GPU.
# Sizes can be overridden from the environment (VOCAB, HIDDEN, LAYERS, LENGTH, BATCH, STEPS, LR, FT_EPOCHS, SEEDS,
# VARIANTS, PROBE_EVERY, QUEUE, ...). Contriever's queue holds QUEUE keys (default 64 batches, the reference's
# 131,072 keys over its 2,048-document global batch).
source "$(dirname "$0")/lib.sh"
SCALE=${SCALE:-cpu}
RUNS=${1:-runs/field-objectives-$SCALE}
if [ "$SCALE" = gpu ]; then
  VOCAB=${VOCAB:-8000} HIDDEN=${HIDDEN:-256} LAYERS=${LAYERS:-4} LENGTH=${LENGTH:-128} BATCH=${BATCH:-128}
  STEPS=${STEPS:-2000} LR=${LR:-1e-3} FT_EPOCHS=${FT_EPOCHS:-4} PRECISION=${PRECISION:-bf16} PARALLEL=${PARALLEL:-3}
else
  VOCAB=${VOCAB:-2000} HIDDEN=${HIDDEN:-128} LAYERS=${LAYERS:-2} LENGTH=${LENGTH:-64} BATCH=${BATCH:-32}
  STEPS=${STEPS:-1200} LR=${LR:-2e-3} FT_EPOCHS=${FT_EPOCHS:-3} PRECISION=${PRECISION:-no} PARALLEL=${PARALLEL:-1}
fi
SEEDS=${SEEDS:-1 2 3} LOG_EVERY=${LOG_EVERY:-50}
PROBE_EVERY=${PROBE_EVERY:-$(( STEPS / 4 / LOG_EVERY * LOG_EVERY > 0 ? STEPS / 4 / LOG_EVERY * LOG_EVERY : LOG_EVERY ))}
QUEUE=${QUEUE:-$(( 64 * BATCH / 2 ))} HALF=$(( BATCH / 2 ))
VARIANTS=${VARIANTS:-none mlm seed retromae-basic retromae-enhanced dupmae condenser cocondenser contriever simcse \
contrastive none-mean retromae-enhanced-mean}
DATASET=${DATASET:-$RUNS/data} INIT=$RUNS/initial-model  # DATASET: any BEIR folder with train and test qrels
mkdir -p "$RUNS"

stdlib_dataset "$DATASET"
quickstart_initial_model "$DATASET/corpus.jsonl" "$INIT" "$VOCAB" "$HIDDEN" "$LAYERS" "$LENGTH"

objective_options() {  # objective_options VARIANT: the pre-training options that make the variant
  case $1 in
    mlm) echo --objective mlm --encoder-mask-ratio 0.15 --batch-size "$BATCH" ;;
    seed) echo --objective seed --encoder-mask-ratio 0.15 --batch-size "$BATCH" ;;
    retromae-basic) echo --objective retromae --decoding basic --batch-size "$BATCH" ;;
    retromae-enhanced) echo --objective retromae --decoding enhanced --batch-size "$BATCH" ;;
    dupmae) echo --objective dupmae --batch-size "$BATCH" ;;
    condenser) echo --objective condenser --encoder-mask-ratio 0.15 --batch-size "$BATCH" ;;
    cocondenser) echo --objective cocondenser --encoder-mask-ratio 0.15 --batch-size "$HALF" ;;
    contriever) echo --objective contriever --queue-size "$QUEUE" --batch-size "$HALF" ;;
    simcse) echo --objective simcse --batch-size "$HALF" ;;
    contrastive) echo --objective contrastive --batch-size "$HALF" ;;
    *) echo "unknown variant $1" >&2; return 1 ;;
  esac
}

cache_dir() {  # cache_dir VARIANT_DIR: one token store for sequential runs; concurrent ones keep their own
  if [ "$PARALLEL" -gt 1 ]; then echo "$1/cache"; else echo "$RUNS/cache"; fi
}

run_variant() {  # run_variant SEED VARIANT: pre-train (unless none or a control), score zero-shot, fine-tune, score
  local seed=$1 name=$2 dir=$RUNS/seed-$1/$2 base=${2%-mean} model=$INIT pooling=()
  if [ "$base" != "$name" ]; then pooling=(--pooling mean); fi  # BASE-mean: BASE's encoder, with mean pooling
  if [ "$base" != none ]; then
    if [ "$base" = "$name" ]; then
      local options
      options=$(objective_options "$name")
      # shellcheck disable=SC2086  # the options are words
      pretrain_variant "$dir" --model "$INIT" --corpus "$DATASET/corpus.jsonl" --max-length "$LENGTH" \
        --max-steps "$STEPS" --learning-rate "$LR" --warmup-ratio 0.05 --log-every "$LOG_EVERY" --save-every 300 \
        --mixed-precision "$PRECISION" --seed "$seed" --cache-dir "$(cache_dir "$dir")" --probe "$DATASET" \
        --probe-every "$PROBE_EVERY" --probe-queries 300 --probe-documents 5000 $options
    fi
    model=$RUNS/seed-$seed/$base/pretrain/encoder
  fi
  evaluate_variant "$dir" zero-shot --model "$model" --data "$DATASET" --query-max-length 32 --passage-max-length 128 \
    "${pooling[@]}"
  finetune_variant "$dir" "$model" --data "$DATASET" --split train --negatives none --group-size 1 --normalize \
    --epochs "$FT_EPOCHS" --batch-size 32 --learning-rate 5e-4 --query-max-length 32 --passage-max-length "$LENGTH" \
    --log-every 10 --save-every 0 --seed "$seed" --mixed-precision "$PRECISION" "${pooling[@]}"
  evaluate_variant "$dir" test --model "$dir/finetune/sentence-transformer" --data "$DATASET" --query-max-length 32 \
    --passage-max-length 128
  evaluate_stsb "$dir" "$dir/finetune/sentence-transformer"
}

pass_of() {  # pass_of VARIANT: "controls" for NAME-mean (it reads NAME's encoder), "variants" otherwise
  if [ "${1%-mean}" != "$1" ]; then echo controls; else echo variants; fi
}

for pass in variants controls; do
  pids=()
  for seed in $SEEDS; do
    for name in $VARIANTS; do
      [ "$(pass_of "$name")" = "$pass" ] || continue
      if [ "$PARALLEL" -le 1 ]; then run_variant "$seed" "$name"; continue; fi
      while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || true; done
      run_variant "$seed" "$name" & pids+=($!)
    done
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
done

for seed in $SEEDS; do
  folders=()
  for name in $VARIANTS; do folders+=("$RUNS/seed-$seed/$name"); done
  $PY -m retromae report --overwrite --variants "${folders[@]}" --output "$RUNS/report-seed-$seed" \
    --title "The field's pre-training objectives under one budget ($SCALE scale, seed $seed)"
done
# shellcheck disable=SC2086
$PY "$(dirname "$0")/seeds_table.py" --runs "$RUNS" --seeds $SEEDS --variants $VARIANTS --output "$RUNS/report" \
  --title "The field's pre-training objectives under one budget ($SCALE scale)"
