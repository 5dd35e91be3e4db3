#!/usr/bin/env bash
# The first thing to run on a GPU (docs/deploy.md): at most five minutes on one, a table at the
# end. On a CPU the same steps run with the CUDA-only ones skipped by name (CI runs it so:
# tests/test_gpu_check.py).
#
#   bash scripts/gpu_check.sh             # from the repository's root, in its environment
#
# 1. the GPU-only tests (`pytest -m gpu`: the adapters on CUDA, and every compiled pass
#    replayed as a CUDA graph with no skipped capture and eager's tokens);
# 2. scripts/gpu_check.py: `stream` on every embedded model and tiny adapter with no wait
#    inside a pass, wall >= step for every pass, and a pass's peak memory against the cap;
# 3. `scd-gpu-timing`: on a GPU Janus-Pro-7B's architecture at full size with random weights
#    (a window forward against a one-token one, the engine's share, one image); on a CPU
#    its tiny configs (the plumbing).
# The compiles are kept in inductor's cache (TORCHINDUCTOR_CACHE_DIR, default below), so a
# second run starts warm.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${GPU_CHECK_OUT:-bench_out/gpu_check}
mkdir -p "$OUT"
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$PWD/bench_out/inductor_cache}
if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    GPU=1
else
    GPU=0
fi
status=0
step() {                                   # step NAME SECONDS COMMAND...: run, time, and note the result
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name"
    if timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; then
        result=ok
    else
        result="FAILED (exit $?, $OUT/$name.log)"
        status=1
    fi
    tail -n 25 "$OUT/$name.log"
    RESULTS+=("| $name | $result | $((SECONDS - t0)) s |")
}
RESULTS=()
if [ "$GPU" = 1 ]; then
    step gpu-tests 170 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/test_static_writes.py \
        tests/test_models_janus.py tests/test_models_emu3.py tests/test_models_lumina.py \
        tests/test_models_llamagen.py tests/test_models_cosmos.py
    step engine 60 "$PY" scripts/gpu_check.py
    step gpu-timing 120 "$PY" -m scd_core.measure.gpu_timing --models janus-pro-7b --windows 1,16 \
        --methods scd-mc --images scd-mc --compile-methods "" --repeats 3 --warmup 2 --out "$OUT/gpu_timing.json"
else
    RESULTS+=("| gpu-tests | skipped (CUDA only) | 0 s |")
    step engine 600 "$PY" scripts/gpu_check.py --device cpu
    step gpu-timing 600 "$PY" -m scd_core.measure.gpu_timing --tiny --device cpu --models janus-pro-7b \
        --windows 1,4 --methods scd-mc --images scd-mc --compile-methods "" --repeats 1 --warmup 1 \
        --engine-tokens 16 --out "$OUT/gpu_timing.json"
fi
echo
echo "| step | result | time |"
echo "|---|---|---|"
printf '%s\n' "${RESULTS[@]}"
exit $status
