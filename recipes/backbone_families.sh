#!/usr/bin/env bash
# Experiment: the quickstart's comparison (RetroMAE enhanced against MLM and no pre-training, CLS pooling, the same
# fine-tuning, BM25 beside them) re-run on encoders of other backbone families, over seeds.
# Each run is `retromae quickstart --preset cpu --architecture FAMILY --seed SEED`: the family's own kind of tokenizer
# trained on the standard library's docstrings (ModernBERT and RoBERTa: byte-level BPE; XLM-R and DeBERTa-v2:
# SentencePiece-style Unigram; BERT: WordPiece) and a random 2 x 128 encoder of that family (ModernBERT: rotary
# positions, alternating local and global attention; DeBERTa-v3: relative attention), pre-trained 1,200 steps of
# 32 x 64 tokens. About 3.5 (RoBERTa) to 6 (DeBERTa-v3) minutes a run on 2 idle cores.
# The seeds are gathered into RUNS/families.md and RUNS/families.json (mean and min..max per family and model).
# Usage: recipes/backbone_families.sh [RUNS_DIR]   (from the repository root; one command, resumable per run)
#   FAMILIES (default "modernbert xlm-roberta roberta deberta-v2"), SEEDS (default "42 1 2"); every quickstart size
#   option can be added through QUICKSTART_OPTIONS.
source "$(dirname "$0")/lib.sh"
RUNS=${1:-runs/backbone-families}
FAMILIES=${FAMILIES:-modernbert xlm-roberta roberta deberta-v2}
SEEDS=${SEEDS:-42 1 2} QUICKSTART_OPTIONS=${QUICKSTART_OPTIONS:-}
mkdir -p "$RUNS"

for family in $FAMILIES; do
  for seed in $SEEDS; do
    dir=$RUNS/$family-seed-$seed
    if [ -f "$dir/results.json" ]; then continue; fi
    echo "[$(date +%H:%M:%S)] $family, seed $seed"
    # shellcheck disable=SC2086  # the options are words
    $PY -m retromae quickstart --preset cpu --architecture "$family" --seed "$seed" \
      --output "$dir" --overwrite $QUICKSTART_OPTIONS > "$RUNS/$family-seed-$seed.log" 2>&1 \
      || { echo "failed: $family seed $seed (see $RUNS/$family-seed-$seed.log)" >&2; exit 1; }
  done
done

# shellcheck disable=SC2086
$PY "$(dirname "$0")/families_table.py" --runs "$RUNS" --families $FAMILIES --seeds $SEEDS
