#!/usr/bin/env bash
# Make a Debian package available for the tests that need it (make test):
#   scripts/install_debian.sh PACKAGE "WHAT NEEDS IT" CHECK-COMMAND [ARGS...]
# Idempotent and quiet: nothing happens when CHECK-COMMAND succeeds. Otherwise PACKAGE is
# installed with apt-get, as root or through passwordless sudo. Always exits 0: where it
# cannot be installed, the tests that need it skip and say why; the build goes on.
set -u
PKG=$1
FOR=$2
shift 2

works() {
  timeout 60 "$@" >/dev/null 2>&1
}

if works "$@"; then
  exit 0
fi
if [ "$(id -u)" = "0" ]; then
  AS_ROOT=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  AS_ROOT=(sudo -n)
else
  echo "install_debian: no working $PKG and no root or passwordless sudo to apt-get it; $FOR will skip"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_debian: no working $PKG and no apt-get here; $FOR will skip"
  exit 0
fi
echo "install_debian: installing $PKG with apt-get (once)"
export DEBIAN_FRONTEND=noninteractive
"${AS_ROOT[@]}" apt-get update -qq >/dev/null 2>&1
"${AS_ROOT[@]}" apt-get install -y -qq --no-install-recommends "$PKG" >/dev/null 2>&1
if works "$@"; then
  echo "install_debian: $PKG is ready"
else
  echo "install_debian: apt-get install $PKG failed or it does not run; $FOR will skip"
fi
exit 0
