#!/usr/bin/env bash
# `retromae adapt` on SciFact: the recipe search of issue 33 (its figures: docs/RESULTS.md section 10).
# Usage: recipes/adapt_scifact.sh [MODEL] [RUNS_DIR]   (run from the repository root; CPU is enough)
# For each seed of SEEDS (default "42 1 2") and each objective of OBJECTIVES (default "cropping", adapt's default;
# the others run with adapt's defaults too, e.g. batches of 64, unless ADAPT_OPTIONS says otherwise):
# `retromae adapt` of MODEL (default all-MiniLM-L6-v2) on the SciFact corpus without its labels (pseudo-query
# validation), evaluated zero-shot on SciFact test; then the same with --train SciFact (adapted, then fine-tuned with
# `retromae finetune`'s defaults) against fine-tuning alone under the same defaults and seed. Budgets from the
# environment: PASSES (1) over the corpus, STEP_CAP (2000); ARMS ("unsupervised supervised") picks the arms run. Every variant folder keeps adapt's guard.json (the
# validation score of the base and of every candidate) beside eval/scifact.json and times.txt.
source "$(dirname "$0")/lib.sh"
MODEL=${1:-$(minilm_path)}
RUNS=${2:-runs/adapt-scifact}
SEEDS=${SEEDS:-42 1 2} OBJECTIVES=${OBJECTIVES:-cropping} ARMS=${ARMS:-unsupervised supervised}
read -r -a EXTRA <<< "${ADAPT_OPTIONS:-}"  # e.g. ADAPT_OPTIONS="--batch-size 8 --candidates all --mix 1 0.5"
PASSES=${PASSES:-1} STEP_CAP=${STEP_CAP:-2000}
mkdir -p "$RUNS"

adapt_variant() {  # adapt_variant VARIANT_DIR ADAPT_OPTIONS...: `retromae adapt` into VARIANT_DIR/adapt
  local dir=$1; shift
  [ -f "$dir/adapt/guard.json" ] && return 0
  timed "$dir" adapt $PY -m retromae adapt --model "$MODEL" --corpus "$SCIFACT/corpus.jsonl" --output "$dir/adapt" \
    --passes "$PASSES" --step-cap "$STEP_CAP" --resume "${EXTRA[@]}" "$@"
}

evaluate_scifact "$RUNS/zero-shot" "$MODEL"
for seed in $SEEDS; do
  for objective in $OBJECTIVES; do
    [[ " $ARMS " == *" unsupervised "* ]] || break
    adapt_variant "$RUNS/$objective-s$seed" --objective "$objective" --seed "$seed"
    evaluate_scifact "$RUNS/$objective-s$seed" "$RUNS/$objective-s$seed/adapt/sentence-transformer"
  done
  [[ " $ARMS " == *" supervised "* ]] || continue
  finetune_variant "$RUNS/finetuned-alone-s$seed" "$MODEL" --data "$SCIFACT" --seed "$seed"
  evaluate_scifact "$RUNS/finetuned-alone-s$seed" "$RUNS/finetuned-alone-s$seed/finetune/sentence-transformer"
  adapt_variant "$RUNS/adapted-finetuned-s$seed" --seed "$seed" --train "$SCIFACT"
  tuned="$RUNS/adapted-finetuned-s$seed"
  evaluate_scifact "$tuned" "$tuned/adapt/finetuned/sentence-transformer"
done
