#!/usr/bin/env bash
# `retromae adapt` on the development collections (issue 49's recipe search; figures: docs/RESULTS.md sections 10.2 and 10.3).
# Usage: recipes/adapt_collections.sh [MODEL] [RUNS_DIR]   (run from the repository root; CPU is enough)
# For each collection of COLLECTIONS (default "scifact npl debian", folders under $DATA/beir), each seed of SEEDS
# (default "42 1 2") and each objective of OBJECTIVES (default "distill"): `retromae adapt` of MODEL (default
# all-MiniLM-L6-v2) on the collection's corpus, without its labels (the guard's held-out queries), then `retromae
# evaluate --hybrid` of the exported model on the collection's test split: the model alone and in the hybrid (convex,
# w = 0.7, BM25 beside), queries at 64 tokens, passages at 256. ADAPT_OPTIONS adds options to every adapt run; TAG
# (default: the objective) names the variant folders RUNS_DIR/COLLECTION/TAG-sSEED, each keeping adapt's guard.json
# beside eval/COLLECTION/ (results.json: the model, BM25, the hybrid) and times.txt. The base's own figures: recipes/hybrid_weights.py (section 11).
# FROM_TAG (a second round): each run adapts the export of RUNS_DIR/COLLECTION/FROM_TAG-sSEED instead of MODEL, so its
# teacher is the first round's hybrid (e.g. TAG=round2 FROM_TAG=distill).
source "$(dirname "$0")/lib.sh"
MODEL=${1:-$(minilm_path)}
RUNS=${2:-runs/adapt-collections}
COLLECTIONS=${COLLECTIONS:-scifact npl debian} SEEDS=${SEEDS:-42 1 2} OBJECTIVES=${OBJECTIVES:-distill}
read -r -a EXTRA <<< "${ADAPT_OPTIONS:-}"  # e.g. ADAPT_OPTIONS="--distill-queries 1000 --mix 0.5"

for collection in $COLLECTIONS; do
  folder=$DATA/beir/$collection
  for seed in $SEEDS; do
    for objective in $OBJECTIVES; do
      dir=$RUNS/$collection/${TAG:-$objective}-s$seed
      base=$MODEL
      [ -z "${FROM_TAG:-}" ] || base=$RUNS/$collection/$FROM_TAG-s$seed/adapt/sentence-transformer
      [ -f "$dir/adapt/guard.json" ] || timed "$dir" adapt $PY -m retromae adapt --model "$base" \
        --corpus "$folder/corpus.jsonl" --output "$dir/adapt" --objective "$objective" --seed "$seed" --resume "${EXTRA[@]}"
      [ -f "$dir/eval/$collection/results.json" ] || timed "$dir" "eval-$collection" $PY -m retromae evaluate \
        --model "$dir/adapt/sentence-transformer" --data "$folder" --split test --bm25 --hybrid \
        --query-max-length 64 --passage-max-length 256 --output "$dir/eval/$collection"
    done
  done
done
