#!/usr/bin/env bash
# A third, short device call: the dense lane swept at 1..16 with --cache-ram 0, then its fairness
# checks, to give the answer without llama.cpp's per-task idle-slot saves (cache_ram.sh showed they
# make F1's TTFT fail). SWEEP_TIMEOUT bounds the sweep; a cut sweep is still derived.
#   device: carry [".whl", ".gpu"], command "bash evidence/h200/cache_ram_sweep.sh"
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/h200-out}; WORK=${WORK:-/tmp/h200s}; MODEL_DIR=${MODEL_DIR:-/dev/shm/satbench-models}
PY=${PY:-python3}; DENSE_SIZE=${DENSE_SIZE:-1.5b}; NGL=${NGL:-99}; NP=${NP:-64}
LEVELS=${LEVELS:-1,2,4,8,16}; SWEEP_TIMEOUT=${SWEEP_TIMEOUT:-150}
mkdir -p "$OUT" "$WORK" "$MODEL_DIR"
LOG="$OUT/steps.log"; t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 )) s] $*" | tee -a "$LOG"; }
run() { "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }
ulimit -c 0 2>/dev/null || true
if [ -d .whl ]; then
    rm -rf "$WORK/site"
    run "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl || exit 1
    export PYTHONPATH=$WORK/site:$ROOT/src
else
    export PYTHONPATH=$ROOT/src
fi
SB=("$PY" -m satbench.cli.main)
if [ -z "${LLAMA_SERVER:-}" ]; then
    mkdir -p /tmp/llama && tar xzf .gpu/llama-cpp-b11434-cuda-sm90.tar.gz -C /tmp/llama
    LLAMA_SERVER=$(find /tmp/llama -type f -name llama-server | head -1)
    export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
fi
"$LLAMA_SERVER" --version >/dev/null 2>&1 || export LD_LIBRARY_PATH=$(dirname "$LLAMA_SERVER")/fallback:${LD_LIBRARY_PATH:-}
M="$MODEL_DIR/dense-$DENSE_SIZE.gguf"
step "model"
[ -f "$M" ] || run timeout 120 "${SB[@]}" models make --arch llama --size "$DENSE_SIZE" -o "$M" || exit 1
R="$WORK/run"; rm -rf "$R"
step "sweep $LEVELS, --cache-ram 0, with fairness (timeout $SWEEP_TIMEOUT s)"
run timeout --signal=TERM --kill-after=10 "$SWEEP_TIMEOUT" "${SB[@]}" sweep --model "$M" --server-bin "$LLAMA_SERVER" \
    -ngl "$NGL" -np "$NP" --concurrency "$LEVELS" --repetitions 3 --prompt-tokens 128 --output-tokens 32 \
    --request-timeout 60 --server-arg=--cache-ram --server-arg=0 --with-fairness -o "$R"
step "sweep exit $?"
if [ -f "$R/run.json" ] && [ ! -f "$R/SHA256SUMS" ]; then
    run timeout 40 "${SB[@]}" analyze "$R"; run timeout 20 "${SB[@]}" recommend "$R"; run timeout 40 "${SB[@]}" report "$R"
fi
cp "$LOG" "$WORK/steps.log"
tar czf "$OUT/h200-cache-ram-sweep.tar.gz" --exclude=run/.lock -C "$WORK" run steps.log
rm -f "$MODEL_DIR"/dense-*.gguf
step "done"
