#!/usr/bin/env bash
# Experiment 3: domain adaptation. all-MiniLM-L6-v2 → RetroMAE on the SciFact corpus (no labels) → fine-tune on
# SciFact train → SciFact test, against the same fine-tuning without the RetroMAE stage, zero-shot MiniLM and BM25.
# Each model is fine-tuned twice with identical commands, once with CLS pooling (what RetroMAE trains) and once with
# mean pooling (what MiniLM was trained with), so every comparison is between identical commands.
# Usage: recipes/domain_adaptation.sh [RUNS_DIR]   (from the repository root; sizes from the environment)
# Full scale (GPUs): MODEL=bert-base-uncased STEPS=20000 BATCH=64 LENGTH=512 LAUNCH="accelerate launch -m" \
#   recipes/domain_adaptation.sh runs/domain-adaptation-full
source "$(dirname "$0")/lib.sh"
RUNS=${1:-runs/domain-adaptation}
MODEL=${MODEL:-$(minilm_path)}
STEPS=${STEPS:-60} BATCH=${BATCH:-16} LENGTH=${LENGTH:-256} LR=${LR:-5e-5} FT_EPOCHS=${FT_EPOCHS:-1}

mkdir -p "$RUNS/bm25"
[ -f "$RUNS/bm25/run.trec" ] || \
  timed "$RUNS/bm25" bm25 $PY -m retromae bm25 --data "$SCIFACT" --split test --output "$RUNS/bm25/run.trec"
evaluate_variant "$RUNS/bm25" scifact --run "$RUNS/bm25/run.trec" --data "$SCIFACT"
evaluate_scifact "$RUNS/minilm-zero-shot" "$MODEL"

pretrain_variant "$RUNS/retromae-stage" --model "$MODEL" --corpus "$SCIFACT" --objective retromae \
  --max-length "$LENGTH" --batch-size "$BATCH" --max-steps "$STEPS" --learning-rate "$LR" --warmup-ratio 0.1 \
  --log-every 10 --save-every 25

fine_tuned() {  # fine_tuned NAME MODEL POOLING: fine-tune on SciFact train (in-batch negatives), evaluate on test
  local dir=$RUNS/$1
  finetune_variant "$dir" "$2" --data "$SCIFACT" --negatives none --group-size 1 --pooling "$3" --normalize \
    --epochs "$FT_EPOCHS" --batch-size 32 --learning-rate 3e-5 --query-max-length 64 --passage-max-length 128 \
    --log-every 5
  evaluate_scifact "$dir" "$dir/finetune/sentence-transformer"
}
for pooling in cls mean; do
  fine_tuned "minilm-finetuned-$pooling" "$MODEL" "$pooling"
  mkdir -p "$RUNS/minilm-retromae-finetuned-$pooling"
  ln -sfn ../retromae-stage/pretrain "$RUNS/minilm-retromae-finetuned-$pooling/pretrain"
  fine_tuned "minilm-retromae-finetuned-$pooling" "$RUNS/retromae-stage/pretrain/encoder" "$pooling"
done

$PY -m retromae report --output "$RUNS/report" --title "Domain adaptation on SciFact (MiniLM-L6)" --variants \
  "$RUNS"/{bm25,minilm-zero-shot,retromae-stage,minilm-finetuned-cls,minilm-retromae-finetuned-cls,minilm-finetuned-mean,minilm-retromae-finetuned-mean}
