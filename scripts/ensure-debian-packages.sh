#!/bin/sh
# Install Debian packages that the test suite needs, when their binary is missing.
#
#   scripts/ensure-debian-packages.sh PKG[:BINARY] ...
#
# A package counts as present when BINARY (default: the package's own name) is on PATH, so a
# second run costs a few milliseconds. Missing ones are installed in ONE apt call:
#   apt-get update && apt-get install -y --no-install-recommends PKG...
# as root, or through sudo. Without root and without sudo it says what to run and exits 1, so
# `make test` fails loudly instead of skipping the tests that need these programs.
# Services the packages ship are not started (a temporary policy-rc.d denies it): the tests start
# their own servers on loopback.
set -eu

if [ "$#" -eq 0 ]; then
    echo "usage: $0 PKG[:BINARY] ..." >&2
    exit 2
fi

# Debian installs daemons under /usr/sbin on some layouts; look there too.
PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

missing=""
for spec in "$@"; do
    pkg=${spec%%:*}
    bin=${spec#*:}
    if ! command -v "$bin" >/dev/null 2>&1; then
        missing="$missing $pkg"
    fi
done

[ -z "$missing" ] && exit 0

echo "ensure-debian-packages: installing$missing (needed by the tests)" >&2

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-debian-packages: apt-get not found; install these packages yourself:$missing" >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "ensure-debian-packages: not root and no sudo; run as root:" >&2
    echo "    apt-get update && apt-get install -y --no-install-recommends$missing" >&2
    exit 1
fi

# Keep package scripts from starting services (containers have no init; hosts should not get a
# Prometheus on :9090 from the test suite). Only a policy-rc.d created here is removed again.
POLICY=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
    if [ "$created_policy" -eq 1 ]; then
        $SUDO rm -f "$POLICY"
    fi
}
trap cleanup EXIT INT TERM
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod 755 "$POLICY"
    created_policy=1
fi

$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
# shellcheck disable=SC2086  # word splitting of the package list is intended
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing

for spec in "$@"; do
    bin=${spec#*:}
    if ! command -v "$bin" >/dev/null 2>&1; then
        echo "ensure-debian-packages: installed, but '$bin' is still not on PATH" >&2
        exit 1
    fi
done
