#!/usr/bin/env bash
# Install the Debian packages the test suite needs, idempotently:
#   bubblewrap  process isolation for code-executing verifiers (rlenv/sandbox.py)
#   faketime    libfaketime, the frozen clock inside that sandbox and for tool subprocesses
#   chromium    headless rendering of report.html in the report tests
# Does nothing (and needs no root) when both are already present.
set -euo pipefail

have_faketime_lib() {
  local lib
  for lib in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 \
             /usr/lib64/faketime/libfaketime.so.1 /usr/local/lib/faketime/libfaketime.so.1; do
    [ -e "$lib" ] && return 0
  done
  return 1
}

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
have_faketime_lib || missing+=(faketime)
[ -x /usr/bin/chromium ] || missing+=(chromium)

if [ "${#missing[@]}" -eq 0 ]; then
  echo "system-deps: bubblewrap, libfaketime and chromium already present"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "system-deps: missing ${missing[*]} and not root (run this script as root)" >&2
    exit 1
  fi
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: missing ${missing[*]} and no apt-get; install them by hand" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "system-deps: installing ${missing[*]}"
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
