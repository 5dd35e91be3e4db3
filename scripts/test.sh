#!/usr/bin/env bash
# The README's test command: install everything the tests need into .venv, then run pytest
# (extra arguments go to pytest; docs/testing.md).
#   1. As root: Debian's chromium (browser tests), fonts-noto-color-emoji and unicode-data
#      (emoji data tests). Otherwise it says what is missing and how to install it.
#   2. torch's CPU build, explicitly: PyPI's torch for Linux is the CUDA build (several GB of
#      nvidia-* wheels). From PyTorch's CPU index; where that cannot be reached, from pip's
#      configured indexes only if what pip finds there is a CPU build. Then it checks.
#   3. The project with its dev extra (pip install -e '.[dev]'), then pytest in two processes:
#      CI's lanes (all but slow, ray and drill: about 15 minutes on 2 cores), with --all as the
#      first argument every lane (about 30), with --quick the quick lane (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.13.0
CPU_INDEX=https://download.pytorch.org/whl/cpu

missing=""
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing="$missing chromium"
[ -f /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ] || missing="$missing fonts-noto-color-emoji"
[ -f /usr/share/unicode/emoji/emoji-test.txt ] || missing="$missing unicode-data"
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== apt-get install$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "== missing Debian packages:$missing (the tests that need them are skipped; in CI a missing"
    echo "   chromium fails the browser tests)."
    echo "   Install them with: sudo apt-get install$missing"
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "${PYTHON:-python3}" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip

torch_is_cpu() {
  python -c 'import sys, torch; sys.exit(torch.__version__.split("+")[0] != sys.argv[1] or torch.version.cuda is not None)' \
    "$TORCH_VERSION" 2>/dev/null
}

# "VERSION URL" of the torch wheel pip would pick with these options; nothing is installed.
torch_wheel() {
  python -m pip install -q --dry-run --no-deps --report - "$@" "torch==$TORCH_VERSION" |
    python -c 'import json, sys; i = json.load(sys.stdin)["install"][0]; print(i["metadata"]["version"], i["download_info"]["url"])'
}

is_cpu_wheel() { case "$1" in *+cpu\ *) return 0 ;; *) return 1 ;; esac; }

if ! torch_is_cpu; then
  echo "== torch $TORCH_VERSION, CPU build"
  # No retries and a short timeout: where PyTorch's index cannot be reached, this fails fast.
  wheel=$(PIP_RETRIES=0 torch_wheel --timeout 10 --index-url "$CPU_INDEX") || wheel=""
  if ! is_cpu_wheel "$wheel"; then
    echo "   PyTorch's CPU index cannot be reached; asking pip's configured indexes"
    wheel=$(torch_wheel) || wheel=""
  fi
  if ! is_cpu_wheel "$wheel"; then
    echo "ERROR: pip finds no CPU build of torch $TORCH_VERSION (it would install '${wheel%% *}'," >&2
    echo "       a CUDA build of several GB). Reach $CPU_INDEX or give pip a CPU wheel" >&2
    echo "       (PIP_FIND_LINKS=folder)." >&2
    exit 1
  fi
  echo "   ${wheel#* }"
  python -m pip install -q "${wheel#* }"
fi
if ! torch_is_cpu; then
  echo "ERROR: the installed torch is not torch $TORCH_VERSION's CPU build:" >&2
  python -c 'import torch; print("      ", torch.__version__, "CUDA", torch.version.cuda)' >&2 || true
  exit 1
fi

echo "== pip install -e '.[dev]'"
python -m pip install -q -e '.[dev]'
torch_is_cpu || { echo "ERROR: installing the project replaced torch's CPU build" >&2; exit 1; }

# CI's lanes by default, as CI runs them; --all every lane; --quick pytest.ini's quick lane.
lanes=(-m "not slow and not ray and not drill")
case "${1:-}" in
  --all) shift; lanes=(-m "") ;;
  --quick) shift; lanes=() ;;
esac
# Two test processes (pytest-xdist; SCD_TEST_WORKERS sets how many, 0 for one process), each
# test file whole in one of them (its module fixtures, a served page or a Ray cluster, made
# once), the browser files all in one process, the longest first (tests/conftest.py).
workers=${SCD_TEST_WORKERS:-2}
parallel=()
[ "$workers" != 0 ] && parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
echo "== pytest"
exec python -m pytest "${parallel[@]}" "${lanes[@]}" "$@"
