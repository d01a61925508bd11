# Shared by recipes/objectives.sh and recipes/ablations.sh (sourced): one small BERT from scratch with BERT's uncased
# vocabulary, the same random initialisation for every variant, one pre-training budget, one fine-tuning recipe.
# Both experiments write into one RUNS folder, so the variants they share (retromae enhanced with the default mask
# ratios; basic decoding with one layer) are trained once.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS=${1:-runs/small-scale}
TOKENIZER=${TOKENIZER:-$(minilm_path)}
# SCALE=cpu (default): a budget two CPU cores run in about 40 minutes per recipe. SCALE=gpu: the settings of the H100
# measurement (../shared/measurements/h100-2026-11-22: 4 x 256, 3,000 steps of 128 x 128 tokens, bf16, CLS pooling),
# PARALLEL variants sharing the GPU at once (about 3 minutes of pre-training each there).
SCALE=${SCALE:-cpu}
if [ "$SCALE" = gpu ]; then
  BATCH=${BATCH:-128} STEPS=${STEPS:-3000} PRECISION=${PRECISION:-bf16} FT_POOLING=${FT_POOLING:-cls}
  PARALLEL=${PARALLEL:-3} LOG_EVERY=${LOG_EVERY:-50} SAVE_EVERY=${SAVE_EVERY:-500}
fi
HIDDEN=${HIDDEN:-256} LAYERS=${LAYERS:-4} LENGTH=${LENGTH:-128} BATCH=${BATCH:-16} STEPS=${STEPS:-120}
LR=${LR:-1e-3} FT_EPOCHS=${FT_EPOCHS:-2} FT_LR=${FT_LR:-5e-4} PRECISION=${PRECISION:-no} PARALLEL=${PARALLEL:-1}
LOG_EVERY=${LOG_EVERY:-10} SAVE_EVERY=${SAVE_EVERY:-50}
# CPU scale fine-tunes with mean pooling: at its budget a from-scratch model fine-tuned with CLS pooling stays at
# chance (docs/RESULTS.md); the GPU scale and full scale use CLS pooling, the papers' choice.
FT_POOLING=${FT_POOLING:-mean}
read -r -a CORPUS <<< "${CORPUS:-$DATA/pretrain/nltk-english.jsonl $DATA/pretrain/python-docs.jsonl}"
INIT=$RUNS/initial-model

[ -f "$INIT/config.json" ] || $PY -m retromae init-model --tokenizer "$TOKENIZER" --output "$INIT" \
  --hidden-size "$HIDDEN" --layers "$LAYERS"

run_variant() {  # run_variant NAME PRETRAIN_OPTIONS...: pre-train (no options: none), fine-tune on SciFact, evaluate
  local name=$1; shift
  local dir=$RUNS/$name model=$INIT
  if [ $# -gt 0 ]; then
    local sources=() cache=()
    [[ " $* " == *" --init-from "* ]] || sources+=(--model "$INIT")
    [[ " $* " == *" --pairs "* || " $* " == *" --corpus "* ]] || sources+=(--corpus "${CORPUS[@]}")
    # Concurrent runs each keep their own token store: they would otherwise build the same one at once.
    [ "$PARALLEL" -gt 1 ] && cache=(--cache-dir "$dir/cache")
    pretrain_variant "$dir" "${sources[@]}" --max-length "$LENGTH" --batch-size "$BATCH" --max-steps "$STEPS" \
      --learning-rate "$LR" --warmup-ratio 0.05 --log-every "$LOG_EVERY" --save-every "$SAVE_EVERY" \
      --mixed-precision "$PRECISION" "${cache[@]}" "$@"
    model=$dir/pretrain/encoder
  fi
  finetune_variant "$dir" "$model" --data "$SCIFACT" --negatives none --group-size 1 --pooling "$FT_POOLING" --normalize \
    --epochs "$FT_EPOCHS" --batch-size 32 --learning-rate "$FT_LR" --query-max-length 64 --passage-max-length 128 \
    --log-every 5 --mixed-precision "$PRECISION"
  evaluate_scifact "$dir" "$dir/finetune/sentence-transformer"
  evaluate_stsb "$dir" "$dir/finetune/sentence-transformer"
}

VARIANT_PIDS=()
variant() {  # variant NAME PRETRAIN_OPTIONS...: run_variant, in the background while fewer than PARALLEL run
  if [ "$PARALLEL" -le 1 ]; then
    run_variant "$@"
    return
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || true; done
  run_variant "$@" &
  VARIANT_PIDS+=($!)
}

finish_variants() {  # wait for the background variants; fail if any failed
  local pid failed=0
  for pid in "${VARIANT_PIDS[@]}"; do wait "$pid" || failed=1; done
  VARIANT_PIDS=()
  return "$failed"
}
