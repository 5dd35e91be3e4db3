#!/usr/bin/env bash
# Train `tiny-64`, the embedded 64 px emoji model with 16x16 tokens, from a clean clone, on a CPU.
#
#   scripts/train_tiny64.sh                 # every step; writes scd_core/assets/tiny64
#   OUT=assets_tiny64 scripts/train_tiny64.sh   # somewhere else (the shipped folder left alone)
#
# Steps (docs/training.md): render the emoji at 64 px; fine-tune the shipped 32 px tokenizer
# (fully convolutional, 4 px patches) on them; tokenize; train the image prior with attention
# local in 2-D; export (fp16); draw the samples sheet; measure. Every trainer is deterministic
# given its seed and thread count, resumes from its checkpoint (run the script again after an
# interruption and it continues), and stops itself with a checkpoint after --max-minutes (run
# it again to go on). FRESH=1 deletes this recipe's checkpoints first.
#
# Time on a 2-core CPU, one thread, other work on the second core: 30 min in all (data 10 s,
# tokenizer 3 min, tokens 1 min, prior 22 min at about 1.1 s a step, export and samples 1 min,
# the benchmark 2.5 min, the influence curve and nearest-emoji rate 1.5 min); a prior step takes
# 5-9 s when both cores are busy. THREADS=2 is faster where the cores are free.
#
# The shipped weights (scd_core/assets/tiny64/config.json) came from exactly these settings:
# seed 0, tokenizer 300 steps; prior 1,200 steps whose first 632 ran under the cosine schedule
# of a 1,500-step run (PRIOR_FIRST_STEPS, PRIOR_FIRST_SCHEDULE) and the rest under the 1,200-step
# one. PRIOR_FIRST_STEPS=0 trains the plain 1,200-step schedule instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
[ -x .venv/bin/python ] && PY=.venv/bin/python

THREADS=${THREADS:-1}
DEVICE=${DEVICE:-cpu}
OUT=${OUT:-scd_core/assets/tiny64}
VQ_STEPS=${VQ_STEPS:-300}
PRIOR_STEPS=${PRIOR_STEPS:-1200}
PRIOR_FIRST_STEPS=${PRIOR_FIRST_STEPS:-632}
PRIOR_FIRST_SCHEDULE=${PRIOR_FIRST_SCHEDULE:-1500}
PRIOR_ARGS=${PRIOR_ARGS:-"--d-model 128 --layers 4 --heads 4 --attention local,local,self,self --local-rows 1 --local-cols 1"}
MAX_MINUTES=${MAX_MINUTES:-600}
if [ "${FRESH:-0}" = 1 ]; then rm -f checkpoints/vq64.* checkpoints/image_prior64.* checkpoints/image_prior64_step*; fi
T0=$SECONDS
stamp() { echo "== [$((SECONDS - T0)) s] $*"; }

# 1. Data: the 3,655 emoji at 64 px (143 held out by a hash of their design's name).
if [ ! -f data/emoji64/images.safetensors ]; then
  stamp "data"
  $PY -m scd_core.train.data --out data/emoji64 --size 64 --big 0
fi

# 2. Tokenizer: the shipped 32 px one, fine-tuned on 64 px images (16x16 codes of 512).
stamp "tokenizer"
$PY -m scd_core.train.tokenizer --data data/emoji64 --ckpt checkpoints/vq64 --image-size 64 --patch 4 \
  --init-from scd_core/assets/tiny --steps "$VQ_STEPS" --batch 32 --lr 5e-4 --eval-every 100 \
  --max-minutes "$MAX_MINUTES" --device "$DEVICE" --threads "$THREADS"

# 3. Tokens: every emoji at 9 placements, 16x16 codes each, and the prompt vocabulary.
if [ ! -f data/tokens64/image.safetensors ] || [ checkpoints/vq64.safetensors -nt data/tokens64/image.safetensors ]; then
  stamp "tokens"
  $PY -m scd_core.train.tokens --data data/emoji64 --vq checkpoints/vq64 --out data/tokens64 --what image \
    --device "$DEVICE" --threads "$THREADS"
fi

# 4. Image prior over [prompt, 256 tokens], two layers local in 2-D and two per-position.
#    Snapshots at 500, 800 and 1000 steps: the "training longer" experiment's models.
stamp "image prior"
prior() {
  $PY -m scd_core.train.prior --kind image --tokens data/tokens64 --ckpt checkpoints/image_prior64 \
    --batch 32 --lr 2e-3 $PRIOR_ARGS --eval-every 200 --max-eval 320 --snapshots 500,800,1000 \
    --max-minutes "$MAX_MINUTES" --device "$DEVICE" --threads "$THREADS" "$@"
}
if [ "$PRIOR_FIRST_STEPS" -gt 0 ]; then
  prior --steps "$PRIOR_FIRST_SCHEDULE" --stop-at "$PRIOR_FIRST_STEPS"
  step=$($PY -c "import json; print(json.load(open('checkpoints/image_prior64.json'))['step'])")
  if [ "$step" -lt "$PRIOR_FIRST_STEPS" ]; then
    echo "the prior stopped at step $step of $PRIOR_FIRST_STEPS (time limit): run the script again to go on"; exit 3
  fi
fi
prior --steps "$PRIOR_STEPS"
step=$($PY -c "import json; print(json.load(open('checkpoints/image_prior64.json'))['step'])")
if [ "$step" -lt "$PRIOR_STEPS" ]; then
  echo "the prior stopped at step $step of $PRIOR_STEPS (time limit): run the script again to go on"; exit 3
fi

# 5. Export (fp16) and the samples sheet.
stamp "export"
$PY -m scd_core.train.export --vq checkpoints/vq64 --image checkpoints/image_prior64 --video none \
  --vocab data/tokens64/vocab.json --out "$OUT"
stamp "samples"
$PY -m scd_core.train.samples --model "$OUT" --threads "$THREADS"

# 6. Measurements (docs/embedded-models.md): step compression on held-out prompts, 4 seeds;
#    the influence curve; the nearest-emoji rate (against `tiny`'s, at 32 px).
stamp "bench"
$PY -m scd_core.bench --model "$OUT" --methods ar,sjd,scd-mc,scd-gumbel --windows 16,32,64 --seeds 4 \
  --prompts scd_core/assets/tiny64/heldout_prompts.txt --threads "$THREADS" --csv bench_out/tiny64.csv \
  --prompts-csv bench_out/tiny64-prompts.csv
stamp "influence"
$PY -m bench influence-curve --model "$OUT" --threads "$THREADS" --csv bench_out/tiny64-influence.csv
stamp "nearest emoji"
[ -f data/emoji32/images.safetensors ] || $PY -m scd_core.train.data --out data/emoji32 --size 32 --big 0
$PY -m bench nearest-emoji --model tiny --model "$OUT" --data data/emoji32 --threads "$THREADS"
stamp "done"
