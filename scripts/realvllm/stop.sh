#!/bin/sh
# Stop a server started by scripts/realvllm/serve.sh: SIGTERM its process group, SIGKILL after 30 s.
#
#   scripts/realvllm/stop.sh WORKDIR
set -eu
if [ "$#" -ne 1 ]; then
    echo "usage: $0 WORKDIR" >&2
    exit 2
fi
PIDFILE=$1/server.pid
[ -f "$PIDFILE" ] || { echo "no $PIDFILE: nothing to stop" >&2; exit 0; }
PID=$(cat "$PIDFILE")
# The API server leads its own process group when started from a shell or with setsid; else signal it alone.
kill -TERM -- "-$PID" 2>/dev/null || kill -TERM "$PID" 2>/dev/null || { rm -f "$PIDFILE"; exit 0; }
i=0
while kill -0 "$PID" 2>/dev/null && [ "$i" -lt 60 ]; do
    sleep 0.5
    i=$((i + 1))
done
if kill -0 "$PID" 2>/dev/null; then
    kill -KILL -- "-$PID" 2>/dev/null || kill -KILL "$PID" 2>/dev/null || true
fi
rm -f "$PIDFILE"
