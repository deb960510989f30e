#!/usr/bin/env bash
# A short second device call: F1 (equal requests) on the dense lane, with llama.cpp's default RAM
# prompt cache and with --cache-ram 0, one server each. The first H200 run failed F1 on TTFT (about
# 120 ms against a 27 ms bound) while the server's own prompt time was 9-16 ms; b11434 saves every
# newly idle slot's KV to host RAM when a task starts (--cache-idle-slots, on by default with
# --cache-ram 8192). This measures whether that is the wait. Same carry as run.sh.
#   device: carry [".whl", ".gpu"], command "bash evidence/h200/cache_ram.sh", timeout_s ≤ 200
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/h200-out}
WORK=${WORK:-/tmp/h200c}
MODEL_DIR=${MODEL_DIR:-/dev/shm/satbench-models}
PY=${PY:-python3}
DENSE_SIZE=${DENSE_SIZE:-1.5b}
NGL=${NGL:-99}
NP=${NP:-64}
mkdir -p "$OUT" "$WORK" "$MODEL_DIR"
LOG="$OUT/steps.log"
t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 )) s] $*" | tee -a "$LOG"; }
run() { "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }
ulimit -c 0 2>/dev/null || true
step "python"
if [ -d .whl ]; then
    rm -rf "$WORK/site"
    run "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl \
        || { step "the carried wheels do not install with $PY; stopping"; exit 1; }
    export PYTHONPATH=$WORK/site:$ROOT/src
else
    export PYTHONPATH=$ROOT/src
fi
SB=("$PY" -m satbench.cli.main)
step "llama.cpp"
if [ -z "${LLAMA_SERVER:-}" ]; then
    mkdir -p /tmp/llama && tar xzf .gpu/llama-cpp-b11434-cuda-sm90.tar.gz -C /tmp/llama
    LLAMA_SERVER=$(find /tmp/llama -type f -name llama-server | head -1)
    export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
fi
"$LLAMA_SERVER" --version >/dev/null 2>&1 || export LD_LIBRARY_PATH=$(dirname "$LLAMA_SERVER")/fallback:${LD_LIBRARY_PATH:-}
run "$LLAMA_SERVER" --version
step "model: SYNTHETIC llama $DENSE_SIZE"
M="$MODEL_DIR/dense-$DENSE_SIZE.gguf"
[ -f "$M" ] || run timeout 120 "${SB[@]}" models make --arch llama --size "$DENSE_SIZE" -o "$M" || exit 1
for v in default cache-ram-0; do
    extra=(); [ "$v" = cache-ram-0 ] && extra=(--server-arg=--cache-ram --server-arg=0)
    step "F1 at 4 in flight, $v"
    rm -rf "$WORK/run-$v"
    run timeout --kill-after=10 60 "${SB[@]}" fairness --checks F1 --model "$M" --server-bin "$LLAMA_SERVER" \
        -ngl "$NGL" -np "$NP" --concurrency 4 --prompt-tokens 128 --output-tokens 32 "${extra[@]}" \
        -o "$WORK/run-$v"
    step "F1 $v exit $?"
done
tar czf "$OUT/h200-cache-ram.tar.gz" --exclude=.lock -C "$WORK" run-default run-cache-ram-0 2>/dev/null \
    || tar czf "$OUT/h200-cache-ram.tar.gz" -C "$WORK" .
rm -f "$MODEL_DIR"/dense-*.gguf
step "done"
