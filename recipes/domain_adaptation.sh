#!/usr/bin/env bash
# Experiment 3: domain adaptation. all-MiniLM-L6-v2 → RetroMAE on the SciFact corpus (no labels) → fine-tune on
# SciFact train → SciFact test, against the same fine-tuning without the RetroMAE stage, zero-shot MiniLM and BM25.
# The RetroMAE stage runs twice: as is, and with its new heads (MLM head, decoder: MiniLM ships neither) warmed up
# first, WARM_STEPS steps with the encoder frozen at HEAD_LR before STEPS steps of everything.
# Each model is fine-tuned twice with identical commands, once with CLS pooling (what RetroMAE trains) and once with
# mean pooling (what MiniLM was trained with), so every comparison is between identical commands.
# Usage: recipes/domain_adaptation.sh [RUNS_DIR]   (from the repository root; sizes from the environment)
# Full scale (GPUs): MODEL=bert-base-uncased STEPS=20000 BATCH=64 LENGTH=512 LAUNCH="accelerate launch -m" \
#   recipes/domain_adaptation.sh runs/domain-adaptation-full
source "$(dirname "$0")/lib.sh"
RUNS=${1:-runs/domain-adaptation}
MODEL=${MODEL:-$(minilm_path)}
STEPS=${STEPS:-60} BATCH=${BATCH:-16} LENGTH=${LENGTH:-256} LR=${LR:-5e-5} FT_EPOCHS=${FT_EPOCHS:-1}
WARM_STEPS=${WARM_STEPS:-60} HEAD_LR=${HEAD_LR:-1e-3}

bm25_variant "$RUNS/bm25"
evaluate_scifact "$RUNS/minilm-zero-shot" "$MODEL"

retromae_stage() {  # retromae_stage NAME PRETRAIN_OPTIONS...: RetroMAE on the SciFact corpus, no labels
  pretrain_variant "$RUNS/$1" --model "$MODEL" --corpus "$SCIFACT" --objective retromae --max-length "$LENGTH" \
    --batch-size "$BATCH" --learning-rate "$LR" --warmup-ratio 0.1 --log-every 10 --save-every 25 "${@:2}"
}
retromae_stage retromae-stage --max-steps "$STEPS"
retromae_stage retromae-warm-stage --max-steps $((WARM_STEPS + STEPS)) --freeze-encoder-steps "$WARM_STEPS" \
  --head-learning-rate "$HEAD_LR"

fine_tuned() {  # fine_tuned NAME MODEL POOLING: fine-tune on SciFact train (in-batch negatives), evaluate on test
  local dir=$RUNS/$1
  finetune_variant "$dir" "$2" --data "$SCIFACT" --negatives none --group-size 1 --pooling "$3" --normalize \
    --epochs "$FT_EPOCHS" --batch-size 32 --learning-rate 3e-5 --query-max-length 64 --passage-max-length 128 \
    --log-every 5
  evaluate_scifact "$dir" "$dir/finetune/sentence-transformer"
}
for pooling in cls mean; do
  fine_tuned "minilm-finetuned-$pooling" "$MODEL" "$pooling"
  for stage in retromae-stage retromae-warm-stage; do
    variant=minilm-${stage%-stage}-finetuned-$pooling  # minilm-retromae-finetuned-cls, minilm-retromae-warm-...
    mkdir -p "$RUNS/$variant"
    ln -sfn "../$stage/pretrain" "$RUNS/$variant/pretrain"
    fine_tuned "$variant" "$RUNS/$stage/pretrain/encoder" "$pooling"
  done
done

$PY -m retromae report --overwrite --output "$RUNS/report" --title "Domain adaptation on SciFact (MiniLM-L6)" --variants \
  "$RUNS"/{bm25,minilm-zero-shot,retromae-stage,retromae-warm-stage} \
  "$RUNS"/minilm-{finetuned,retromae-finetuned,retromae-warm-finetuned}-{cls,mean}
