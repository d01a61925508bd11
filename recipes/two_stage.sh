#!/usr/bin/env bash
# Experiment: the two-stage workflow of the unified-learner paper (mae-unified-sentence-representation). Stage 1
# pre-trains with RetroMAE from the shared random initialisation; stage 2 continues from it (`--init-from`: its
# encoder and decoder head) with RetroMAE + contrastive learning, once on the SciFact corpus (two spans of a document
# are a positive pair) and once on SNLI entailment pairs. Every model, and the stage-1 model alone, is fine-tuned on
# SciFact train and evaluated on SciFact test and STS-B test, like the objectives of recipes/objectives.sh.
# Usage: recipes/two_stage.sh [RUNS_DIR]   (from the repository root; sizes from the environment:
#   recipes/small_encoder.sh; STAGE2_STEPS sets stage 2's length, default a third of STEPS)
# GPU scale (the H100 measurement's settings; not yet run by this project): SCALE=gpu recipes/two_stage.sh runs/gpu-scale
source "$(dirname "$0")/small_encoder.sh"
STAGE2_STEPS=${STAGE2_STEPS:-$((STEPS / 3))}
SNLI=$DATA/pairs/snli-dev-test.jsonl

variant retromae-enhanced --objective retromae --decoding enhanced  # stage 1 (shared with recipes/objectives.sh)
finish_variants
STAGE1=$RUNS/retromae-enhanced/pretrain
variant stage2-scifact --init-from "$STAGE1" --objective retromae+contrastive --corpus "$SCIFACT" \
  --max-steps "$STAGE2_STEPS"
variant stage2-snli --init-from "$STAGE1" --objective retromae+contrastive --pairs "$SNLI" --max-steps "$STAGE2_STEPS"
finish_variants

$PY -m retromae report --overwrite --variants "$RUNS"/{retromae-enhanced,stage2-scifact,stage2-snli} \
  --output "$RUNS/report-two-stage" --title "Two stages: RetroMAE, then RetroMAE + contrastive"
