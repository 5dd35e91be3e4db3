#!/usr/bin/env bash
# Train and benchmark a 64x64-pixel emoji image model with 16x16 tokens (256 per image), on a GPU.
#
#   scripts/train_64px.sh                  # all steps, on cuda
#   CODEBOOK=1024 scripts/train_64px.sh    # optionally a larger codebook
#
# Everything goes to its own folders (data/emoji64, data/tokens64, checkpoints/vq64,
# checkpoints/image_prior64, assets_64/); the shipped 32 px model in scd_core/assets/tiny is not touched.
# Budget: about 10 minutes on one data-centre GPU, by estimate (per step below). Each trainer resumes
# from its checkpoint, so a second run continues rather than restarts; delete checkpoints/*64.*
# (or pass FRESH=1) to start over. Each trainer also stops itself, with a checkpoint, after
# --max-minutes, so the whole script cannot run away.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .venv/bin/activate ] && . .venv/bin/activate

DEVICE=${DEVICE:-cuda}          # where the networks train and the benchmark runs
THREADS=${THREADS:-8}           # CPU threads: batches are sampled and augmented on the CPU
CODEBOOK=${CODEBOOK:-512}       # tokenizer codes (code 0 = flat white); the prior's vocabulary follows
FRESH=${FRESH:-0}
VQ_STEPS=${VQ_STEPS:-5000}      # step counts (small values: a smoke test of the script on a CPU)
PRIOR_STEPS=${PRIOR_STEPS:-6000}
MAX_PROMPTS=${MAX_PROMPTS:-16}  # bench prompts (the model has 16 example prompts)
fresh=""; [ "$FRESH" = 1 ] && fresh="--fresh"
T0=$SECONDS
stamp() { echo "== [$((SECONDS - T0)) s] $*"; }

# 1. Data (CPU, ~30-60 s): the ~3700 emoji rendered at 64 px. --big 0 skips the big renders
#    that only video clips need (at 192 px they would be ~400 MB), so the folder is ~45 MB and can
#    be rendered on a machine with the fonts (fonts-noto-color-emoji, unicode-data) and carried
#    to the GPU machine; an existing data/emoji64 is reused.
if [ ! -f data/emoji64/images.safetensors ]; then
  stamp "data"
  python -m scd_core.train.data --out data/emoji64 --size 64 --big 0
fi

# 2. Tokenizer (GPU, ~3 min): VQ-lite on 64 px images, 4 px patches -> 16x16 codes. Same
#    architecture and loss as the shipped 32 px one (8x8 codes), so it has 4x the positions per
#    image; batch 64 for 5000 steps (the shipped one saw 64 x 4000 at 32 px).
stamp "tokenizer"
python -m scd_core.train.tokenizer --data data/emoji64 --ckpt checkpoints/vq64 \
  --image-size 64 --patch 4 --codebook-size "$CODEBOOK" --steps "$VQ_STEPS" --batch 64 --lr 2e-3 \
  --eval-every 500 --ckpt-minutes 2 --max-minutes 4 --device "$DEVICE" --threads "$THREADS" $fresh

# 3. Tokens (GPU encode, ~20-40 s): every emoji at 9 placements (shifts of +-4 px at 64 px),
#    16x16 codes each, plus the prompt vocabulary. Images only: this model has no video prior.
stamp "tokens"
python -m scd_core.train.tokens --data data/emoji64 --vq checkpoints/vq64 --out data/tokens64 \
  --what image --device "$DEVICE" --threads "$THREADS"

# 4. Image prior (GPU, ~3-4 min): the shipped architecture (d_model 256, 4 layers, 4 heads) over
#    257 positions (prompt + 16x16); grid and vocabulary come from the token file. The shipped
#    8x8 prior ran 2600 steps of 64; a 4x longer sequence gets 6000 steps of 64.
stamp "image prior"
python -m scd_core.train.prior --kind image --tokens data/tokens64 --ckpt checkpoints/image_prior64 \
  --steps "$PRIOR_STEPS" --batch 64 --lr 1.5e-3 --eval-every 500 --ckpt-minutes 2 --max-minutes 4.5 \
  --device "$DEVICE" --threads "$THREADS" $fresh

# 5. Export (seconds) to its own folder, loadable as scd_core.load_model("assets_64"); no video prior.
stamp "export"
python -m scd_core.train.export --vq checkpoints/vq64 --image checkpoints/image_prior64 --video none \
  --vocab data/tokens64/vocab.json --out assets_64

# 6. Samples to look at (~20 s): assets_64/samples_image.png, 6 per example prompt.
stamp "samples"
python -m scd_core.train.samples --model assets_64 --device "$DEVICE" --threads "$THREADS"

# 7. The image bar (~1 min): AR, SJD and SCD at window 16 with the model's sampling settings
#    (top-k 100, CFG 3), random and repeat-above drafts, 2 seeds per example prompt.
stamp "bench"
python -m scd_core.bench --model assets_64 --methods ar,sjd,scd-mc,scd-gumbel --windows 16 \
  --inits random,repeat-above --seeds 2 --max-prompts "$MAX_PROMPTS" --top-k 100 --cfg-scale 3 --device "$DEVICE" \
  --threads "$THREADS" --csv assets_64/bench_image.csv | tee assets_64/bench_image.md
stamp "done"
