#!/usr/bin/env bash
# Install the Debian packages the test suite needs, idempotently (or only the ones named:
# `scripts/system-deps.sh faketime`, as `make demo` does for `rlenv record`):
#   bubblewrap  process isolation for code-executing verifiers (rlenv/sandbox/)
#   faketime    libfaketime, the frozen clock inside that sandbox and for tool subprocesses
#   chromium    headless rendering of report.html in the report tests
# Does nothing (and needs no root) when all three are already present. Exits non-zero when one
# is missing and cannot be installed, or is still missing (or bubblewrap cannot start a
# sandbox) afterwards: `make test` and CI fail instead of skipping the tests that need them.
set -euo pipefail
WANT=("$@")

want() {
  [ "${#WANT[@]}" -eq 0 ] && return 0
  local name
  for name in "${WANT[@]}"; do [ "$name" = "$1" ] && return 0; done
  return 1
}

have_faketime_lib() {
  local lib
  for lib in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 \
             /usr/lib64/faketime/libfaketime.so.1 /usr/local/lib/faketime/libfaketime.so.1; do
    [ -e "$lib" ] && return 0
  done
  return 1
}

find_missing() {
  missing=()
  if want bubblewrap; then command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap); fi
  if want faketime; then have_faketime_lib || missing+=(faketime); fi
  if want chromium; then [ -x /usr/bin/chromium ] || missing+=(chromium); fi
}

# present is not enough: bubblewrap must be able to start a sandbox here (namespaces allowed)
check_sandbox() {
  want bubblewrap || return 0
  if ! bwrap --ro-bind / / --unshare-net --unshare-pid --dev /dev --proc /proc true 2>/dev/null; then
    echo "system-deps: bubblewrap is installed but cannot start a sandbox here" \
         "(namespaces not permitted: run with --privileged or enable user namespaces)" >&2
    exit 1
  fi
}

find_missing
if [ "${#missing[@]}" -eq 0 ]; then
  check_sandbox
  echo "system-deps: ${WANT[*]:-bubblewrap (working), libfaketime and chromium} already present"
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

find_missing
if [ "${#missing[@]}" -ne 0 ]; then
  echo "system-deps: still missing after install: ${missing[*]}" >&2
  exit 1
fi
check_sandbox
echo "system-deps: ${WANT[*]:-bubblewrap (working), libfaketime and chromium} installed"
