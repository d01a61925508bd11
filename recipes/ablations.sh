#!/usr/bin/env bash
# Experiment 2: the ablations of the RetroMAE paper's Table 6 on the small encoder of experiment 1 (same
# initialisation, budget, fine-tuning and evaluation): decoder mask ratio 0.15 / 0.5 / 0.7 / 0.9 (enhanced decoding),
# encoder mask ratio 0.15 / 0.3 / 0.9 (enhanced), decoder layers 1 / 2 / 3 (basic decoding, as the paper: enhanced
# decoding needs exactly one layer). retromae-enhanced (0.3 / 0.5) and retromae-basic (one layer) are shared with
# recipes/objectives.sh and trained once.
# Usage: recipes/ablations.sh [RUNS_DIR]   (from the repository root; sizes from the environment: recipes/small_encoder.sh)
# GPU scale (the H100 measurement's settings, three variants sharing the GPU at once; not yet run by this project):
#   SCALE=gpu recipes/ablations.sh runs/gpu-scale
source "$(dirname "$0")/small_encoder.sh"

variant retromae-enhanced --objective retromae --decoding enhanced
for ratio in 0.15 0.7 0.9; do
  variant "decoder-mask-$ratio" --objective retromae --decoding enhanced --decoder-mask-ratio "$ratio"
done
for ratio in 0.15 0.9; do
  variant "encoder-mask-$ratio" --objective retromae --decoding enhanced --encoder-mask-ratio "$ratio"
done
variant retromae-basic --objective retromae --decoding basic
for layers in 2 3; do
  variant "basic-$layers-layers" --objective retromae --decoding basic --decoder-layers "$layers"
done

finish_variants

report() {  # report NAME TITLE VARIANT...
  local name=$1 title=$2; shift 2
  $PY -m retromae report --overwrite --variants "${@/#/$RUNS/}" --output "$RUNS/report-$name" --title "$title"
}
report decoder-mask "Decoder mask ratio (enhanced decoding; encoder 0.3)" \
  decoder-mask-0.15 retromae-enhanced decoder-mask-0.7 decoder-mask-0.9
report encoder-mask "Encoder mask ratio (enhanced decoding; decoder 0.5)" \
  encoder-mask-0.15 retromae-enhanced encoder-mask-0.9
report decoder-layers "Decoder layers (basic decoding; masks 0.3 / 0.5)" \
  retromae-basic basic-2-layers basic-3-layers
