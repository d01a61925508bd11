# Shared by recipes/objectives.sh and recipes/ablations.sh (sourced): one small BERT from scratch with BERT's uncased
# vocabulary, the same random initialisation for every variant, one pre-training budget, one fine-tuning recipe.
# Both experiments write into one RUNS folder, so the variants they share (retromae enhanced with the default mask
# ratios; basic decoding with one layer) are trained once.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS=${1:-runs/small-scale}
TOKENIZER=${TOKENIZER:-$(minilm_path)}
HIDDEN=${HIDDEN:-256} LAYERS=${LAYERS:-4} LENGTH=${LENGTH:-128} BATCH=${BATCH:-16} STEPS=${STEPS:-120}
LR=${LR:-1e-3} FT_EPOCHS=${FT_EPOCHS:-2} FT_LR=${FT_LR:-5e-4}
# Fine-tuning pools by the mean: at this budget a from-scratch model fine-tuned with CLS pooling stays at chance
# (docs/RESULTS.md); at full scale use FT_POOLING=cls, the papers' choice.
FT_POOLING=${FT_POOLING:-mean}
read -r -a CORPUS <<< "${CORPUS:-$DATA/pretrain/nltk-english.jsonl $DATA/pretrain/python-docs.jsonl}"
INIT=$RUNS/initial-model

[ -f "$INIT/config.json" ] || $PY -m retromae init-model --tokenizer "$TOKENIZER" --output "$INIT" \
  --hidden-size "$HIDDEN" --layers "$LAYERS"

variant() {  # variant NAME PRETRAIN_OPTIONS...: pre-train (no options: none), fine-tune on SciFact, evaluate
  local name=$1; shift
  local dir=$RUNS/$name model=$INIT
  if [ $# -gt 0 ]; then
    pretrain_variant "$dir" --model "$INIT" --corpus "${CORPUS[@]}" --max-length "$LENGTH" --batch-size "$BATCH" \
      --max-steps "$STEPS" --learning-rate "$LR" --warmup-ratio 0.05 --log-every 10 --save-every 50 "$@"
    model=$dir/pretrain/encoder
  fi
  finetune_variant "$dir" "$model" --data "$SCIFACT" --negatives none --group-size 1 --pooling "$FT_POOLING" --normalize \
    --epochs "$FT_EPOCHS" --batch-size 32 --learning-rate "$FT_LR" --query-max-length 64 --passage-max-length 128 \
    --log-every 5
  evaluate_scifact "$dir" "$dir/finetune/sentence-transformer"
  evaluate_stsb "$dir" "$dir/finetune/sentence-transformer"
}
