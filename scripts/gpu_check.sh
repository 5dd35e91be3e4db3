#!/usr/bin/env bash
# The first thing to run on a GPU (docs/deploy.md): at most five minutes on one, cold compiles
# included (the steps' limits below add to 290 s), one table at the end. On a CPU the same
# steps run with the CUDA-only ones skipped by name (CI runs it so: tests/test_gpu_check.py).
#
#   bash scripts/gpu_check.sh             # from the repository's root, in its environment
#
# 1. gpu-first (80 s): one embedded model's and one adapter's compiled pass (tiny, llamagen),
#    compiled cold, replayed as CUDA graphs (`scd_core.testing.check_cuda_graphs`: a skipped
#    capture is an error, graphs are recorded, a second run records none, eager's tokens);
# 2. gpu-tests (110 s): the other GPU-only tests (`pytest -m gpu`): the other models' and two
#    trees' compiled passes the same way, the adapters on CUDA, the transformers door
#    (tests/test_hf_models.py); four test processes, since compiling is the CPU's work;
# 3. engine (50 s): scripts/gpu_check.py: `stream` on every embedded model and tiny adapter
#    with no wait inside a pass and wall >= step for every pass; a pass timed eager and
#    compiled on tiny, Janus-Pro and LlamaGen (their graphs from inductor's cache, which steps
#    1-2 filled); a pass's peak memory against the cap;
# 4. gpu-timing (50 s): `scd-gpu-timing` on Janus-Pro-7B's architecture at full size with
#    random weights (a window forward against a one-token one, the engine's share, one image);
#    on a CPU its tiny configs (the plumbing).
# pytest's durations (--durations=0) are in each test step's log. The compiles are kept in
# inductor's cache (TORCHINDUCTOR_CACHE_DIR, default below), so a second run starts warm.
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
ROWS=()
step() {                                   # step NAME SECONDS COMMAND...: run, time, and note the result
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS result
    echo "== $name"
    if timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; then
        result=ok
    else
        result="FAILED (exit $?, $OUT/$name.log)"
        status=1
    fi
    tail -n 25 "$OUT/$name.log"
    local summary
    summary=$(grep -E "^=+ .*(passed|failed|error).* in [0-9.]+s" "$OUT/$name.log" | tail -n 1 | tr -d '=' | xargs)
    ROWS+=("| $name | $result${summary:+: $summary} | $((SECONDS - t0)) s |")
}
GPU_TESTS=(tests/test_static_writes.py tests/test_models_janus.py tests/test_models_emu3.py
           tests/test_models_lumina.py tests/test_models_llamagen.py tests/test_models_cosmos.py
           tests/test_hf_models.py)
PYTEST=("$PY" -m pytest -q -m gpu -p no:cacheprovider -p no:randomly --durations=0)
FIRST="tiny-scd-mc or llamagen-scd-mc"
if [ "$GPU" = 1 ]; then
    step gpu-first 80 "${PYTEST[@]}" -n 2 --dist load tests/test_static_writes.py -k "$FIRST"
    step gpu-tests 110 "${PYTEST[@]}" -n 4 --dist load "${GPU_TESTS[@]}" -k "not ($FIRST)"
    step engine 50 "$PY" scripts/gpu_check.py --compiled --rows "$OUT/engine.rows"
    step gpu-timing 50 "$PY" -m scd_core.measure.gpu_timing --models janus-pro-7b --windows 1,16 \
        --methods scd-mc --images scd-mc --compile-methods "" --repeats 3 --warmup 2 --out "$OUT/gpu_timing.json"
else
    ROWS+=("| gpu-first | skipped (CUDA only) | 0 s |" "| gpu-tests | skipped (CUDA only) | 0 s |")
    step engine 600 "$PY" scripts/gpu_check.py --device cpu --rows "$OUT/engine.rows"
    step gpu-timing 600 "$PY" -m scd_core.measure.gpu_timing --tiny --device cpu --models janus-pro-7b \
        --windows 1,4 --methods scd-mc --images scd-mc --compile-methods "" --repeats 1 --warmup 1 \
        --engine-tokens 16 --out "$OUT/gpu_timing.json"
fi
echo
echo "| check | result | time |"
echo "|---|---|---|"
for row in "${ROWS[@]}"; do
    echo "$row"
    if [[ $row == "| engine |"* ]] && [ -f "$OUT/engine.rows" ]; then
        cat "$OUT/engine.rows"                  # the engine step's checks, one row each
    fi
done
exit $status
