#!/usr/bin/env bash
# satbench end to end on the lent H200 machine, in one call: BUDGET_S (540 s) in all,
# inside the call's timeout_s 570; the tarball is packed before capability and verify, and again after.
#
#   device run:  carry [".whl", ".gpu"], timeout_s 570,
#                command "bash evidence/h200/run.sh"
#   CPU rehearsal here (small shapes, the CPU llama-server, a few levels):
#                LLAMA_SERVER=/path/to/llama-server NGL=0 DENSE_SIZE=tiny V4_SIZE=tiny LEVELS=1,2,4 \
#                PY=/path/to/python3.12 OUT=/tmp/h200-rehearsal bash evidence/h200/run.sh
#                (the carried wheels are cp312: another Python stops at the wheel step)
#
# Two SYNTHETIC lanes (random F16 weights written here, into /dev/shm): dense llama 1.5b with a
# 128,256-token vocabulary, and DeepSeek V4 (deepseek4 gpu: V4-Flash's attention and routing, 64
# routed experts top-6 + 1 shared, vocabulary 129,280, 9.1 GB). Each is swept alone at 1..32
# through the CUDA llama-server with --cache-ram 0 (CACHE_RAM; empty = llama.cpp's default, which
# made F1 fail on 2026-12-04: evidence/h200-2026-12-04), then the fairness checks, recommendations,
# the capability report,
# the report with plots, and verify. A server that dies at some level (b11434 did on a deepseek2
# MoE at 64 sequences) is recorded and the run goes on. Everything comes back as
# $OUT/h200-run.tar.gz plus the step log.
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/h200-out}
WORK=${WORK:-/tmp/h200}
MODEL_DIR=${MODEL_DIR:-/dev/shm/satbench-models}
PY=${PY:-python3}
DENSE_SIZE=${DENSE_SIZE:-1.5b}
V4_SIZE=${V4_SIZE:-gpu}
LEVELS=${LEVELS:-1,2,4,8,16,32}   # 64 added nothing on 2026-12-04 and cost ~110 s
REPS=${REPS:-3}      # 3, not 2: with 2 the t-interval (t = 12.7) is so wide that a real gain looks like a knee
PROMPT=${PROMPT:-128}
OUTPUT=${OUTPUT:-32}
NGL=${NGL:-99}
CACHE_RAM=${CACHE_RAM-0}   # llama-server's --cache-ram MiB; set empty for llama.cpp's default (8192 in b11434)
SWEEP_TIMEOUT=${SWEEP_TIMEOUT:-400}
REQUESTS=${REQUESTS:-}     # measured requests per level; empty = the design minimum max(8N, 32)
FAIRNESS=${FAIRNESS:-1}    # 0 = skip the fairness checks (the CPU side-by-side run)
PART_MB=${PART_MB:-15}     # a bigger tarball comes back in parts of this size (the device returns ≤ 16 MiB a file)
BUDGET_S=${BUDGET_S:-540}  # the whole script, inside the call's 570 s: the tarball is packed before this runs out
mkdir -p "$OUT" "$WORK" "$MODEL_DIR"
LOG="$OUT/steps.log"
t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 )) s] $*" | tee -a "$LOG"; }
run() { "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }
left() { echo $(( t0 + BUDGET_S - $(date +%s) )); }            # seconds of the budget still unspent
within() { local l; l=$(( $(left) - $2 )); [ "$l" -lt "$1" ] && echo $(( l > 5 ? l : 5 )) || echo "$1"; }  # cap, reserve
ulimit -c 0 2>/dev/null || true  # a llama-server that aborts (b11434 on a deepseek2 MoE at 64) must not spend seconds dumping core

step "python: wheels the device lacks (.whl), satbench from src/"
if [ -d .whl ]; then
    rm -rf "$WORK/site"  # never an earlier run's packages (another Python's, in a rehearsal)
    run "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl \
        || { step "the carried wheels do not install with $PY (they are cp312); stopping"; exit 1; }
    export PYTHONPATH=$WORK/site:$ROOT/src
else
    export PYTHONPATH=$ROOT/src
fi
run "$PY" -c "import sys, satbench.cli.main, pydantic, gguf, jsonschema, scipy, matplotlib, aiohttp, rich, psutil; print(sys.version)" \
    || { step "satbench cannot be imported here; stopping"; exit 1; }
run "$PY" -c "import pynvml" || step "WARNING: no nvidia-ml-py (pynvml): the run will have no GPU figures"
SB=("$PY" -m satbench.cli.main)

step "llama.cpp: the CUDA build from .gpu/, or \$LLAMA_SERVER"
if [ -z "${LLAMA_SERVER:-}" ]; then
    mkdir -p /tmp/llama && tar xzf .gpu/llama-cpp-b11434-cuda-sm90.tar.gz -C /tmp/llama
    LLAMA_SERVER=$(find /tmp/llama -type f -name llama-server | head -1)
    export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
fi
if ! "$LLAMA_SERVER" --version >/dev/null 2>&1; then  # an older libstdc++ there: the build ships GCC 12's
    export LD_LIBRARY_PATH=$(dirname "$LLAMA_SERVER")/fallback:${LD_LIBRARY_PATH:-}
fi
run "$LLAMA_SERVER" --version || { step "llama-server does not run here; stopping"; exit 1; }
run "$LLAMA_SERVER" --list-devices
{ command -v nvidia-smi >/dev/null && nvidia-smi -q > "$OUT/nvidia-smi.txt" 2>&1; } || true
run "$PY" -c "from satbench.host.gpu import open_nvml; g = open_nvml(); print('NVML:', g.describe() if g else 'no GPU'); print(g.reading() if g else '')"

need_gb=1; [ "$DENSE_SIZE" = 1.5b ] && need_gb=$(( need_gb + 4 )); [ "$V4_SIZE" = gpu ] && need_gb=$(( need_gb + 10 ))
run df -h "$MODEL_DIR" "$WORK"; run free -g
if [ "$(df --output=avail -B1G "$MODEL_DIR" | tail -1 | tr -d ' ')" -lt "$need_gb" ]; then
    MODEL_DIR=$WORK/models; mkdir -p "$MODEL_DIR"
    step "less than $need_gb GB free in /dev/shm: models go to $MODEL_DIR on disk"
fi
step "models: SYNTHETIC random weights into $MODEL_DIR"
DENSE_OK=0; V4_OK=0  # a lane whose model cannot be written is left out; the other one still runs
run timeout "$(within 180 300)" "${SB[@]}" models make --arch llama --size "$DENSE_SIZE" -o "$MODEL_DIR/dense-$DENSE_SIZE.gguf" \
    && DENSE_OK=1 && step "dense written" || step "cannot write the dense model: the run goes on without it"
run timeout "$(within 180 300)" "${SB[@]}" models make --arch deepseek4 --size "$V4_SIZE" -o "$MODEL_DIR/v4-$V4_SIZE.gguf" \
    && V4_OK=1 && step "v4 written" || step "cannot write the V4 model: the run goes on without it"
[ "$DENSE_OK$V4_OK" = 00 ] && { step "no model could be written; stopping"; exit 1; }

LANES="$WORK/lanes.toml"
RUN="$WORK/run"
rm -rf "$RUN"
lane() {  # name, model file
    cat <<TOML
[[lanes]]
name = "$1"
model = "$2"
runtime = "native"
server_bin = "$LLAMA_SERVER"
concurrency = [$LEVELS]
prompt_tokens = $PROMPT
output_tokens = $OUTPUT
repetitions = $REPS
request_timeout_s = 60   # a server hung after a CUDA error must not hold a request for the default 300 s
$( [ -n "$REQUESTS" ] && echo "requests_per_level = $REQUESTS" )

[lanes.server]
n_gpu_layers = $NGL
$( [ -n "$CACHE_RAM" ] && echo "args = [\"--cache-ram\", \"$CACHE_RAM\"]" )

TOML
}
{ [ "$DENSE_OK" = 1 ] && lane dense "$MODEL_DIR/dense-$DENSE_SIZE.gguf"
  [ "$V4_OK" = 1 ] && lane v4 "$MODEL_DIR/v4-$V4_SIZE.gguf"; } > "$LANES"
cp "$LANES" "$OUT/lanes.toml"

SWEEP_TIMEOUT=$(within "$SWEEP_TIMEOUT" 130)  # keep 130 s for deriving, the report, capability, verify and packing
step "sweep: the lanes alone at $LEVELS$( [ "$FAIRNESS" = 1 ] && echo ', then the fairness checks' ) (timeout $SWEEP_TIMEOUT s)"
run timeout --signal=TERM --kill-after=20 "$SWEEP_TIMEOUT" "${SB[@]}" sweep --lanes "$LANES" \
    $( [ "$FAIRNESS" = 1 ] && echo --with-fairness ) -o "$RUN"
rc=$?
step "sweep exit $rc (0 ok, 4 a server failed at some level, 6 a fairness check failed, 124 cut short by the timeout)"

pack() {  # the run directory and the logs as one tarball under $OUT (parts if big); safe to call again
    cp "$LOG" "$WORK/steps.log"
    [ -f "$OUT/nvidia-smi.txt" ] && cp "$OUT/nvidia-smi.txt" "$WORK/"
    rm -f "$OUT"/h200-run.tar.gz "$OUT"/h200-run.tar.gz.part*
    tar czf "$OUT/h200-run.tar.gz" --exclude=run/.lock -C "$WORK" run lanes.toml steps.log \
        $( [ -f "$WORK/capability.json" ] && echo capability.json ) $( [ -f "$WORK/nvidia-smi.txt" ] && echo nvidia-smi.txt )
    if [ "$(stat -c %s "$OUT/h200-run.tar.gz")" -gt $(( PART_MB * 1024 * 1024 )) ]; then
        # the device returns files of at most 16 MiB: cat h200-run.tar.gz.part* > h200-run.tar.gz
        split -b "${PART_MB}M" -d "$OUT/h200-run.tar.gz" "$OUT/h200-run.tar.gz.part" && rm "$OUT/h200-run.tar.gz"
    fi
}

if [ -f "$RUN/run.json" ] && [ ! -f "$RUN/SHA256SUMS" ]; then  # cut short: derive what the raw files hold
    run timeout "$(within 60 40)" "${SB[@]}" analyze "$RUN"
    run timeout "$(within 30 35)" "${SB[@]}" recommend "$RUN"
    run timeout "$(within 90 30)" "${SB[@]}" report "$RUN"
fi
step "pack (first: whatever follows may run out of time)"
pack
step "capability report from the recommendations, against this node"
run timeout "$(within 120 25)" "${SB[@]}" capability --recommendations "$RUN/recommendations.json" --lanes "$LANES" \
    -o "$WORK/capability.json"
step "verify"
run timeout "$(within 120 15)" "${SB[@]}" verify "$RUN"

step "pack again, with the capability report and verify's verdict in the log"
pack
ls -la "$OUT" | tee -a "$LOG"
rm -f "$MODEL_DIR"/dense-*.gguf "$MODEL_DIR"/v4-*.gguf
step "done, sweep exit $rc"
