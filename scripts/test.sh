#!/usr/bin/env bash
# Install everything the tests need into .venv and run them (the README's test command).
#   - torch's CPU build first (an unpinned torch would pull a multi-GB CUDA build);
#   - Debian's chromium (browser test), fonts-noto-color-emoji and unicode-data (emoji data
#     test) when run as root;
#   - then pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=""
  command -v chromium >/dev/null || missing="$missing chromium"
  [ -f /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ] || missing="$missing fonts-noto-color-emoji"
  [ -f /usr/share/unicode/emoji/emoji-test.txt ] || missing="$missing unicode-data"
  if [ -n "$missing" ]; then
    echo "== apt-get install$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "${PYTHON:-python3}" -m venv .venv
fi
. .venv/bin/activate
# requirements.txt adds PyTorch's CPU wheel index; where only PyPI (or a mirror of it) can be
# reached, one retry per lookup of that index instead of pip's five keeps the install quick.
export PIP_RETRIES="${PIP_RETRIES:-1}"
echo "== pip install (torch CPU build, then requirements-dev.txt)"
python -m pip install -q --upgrade pip
python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
python -m pip install -q -r requirements-dev.txt

echo "== pytest"
exec python -m pytest "$@"
