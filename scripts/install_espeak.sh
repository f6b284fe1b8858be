#!/usr/bin/env bash
# Make Debian's espeak-ng available for the multimodal tests' synthesised speech (make test).
# Idempotent and quiet: nothing happens when a working espeak-ng is on PATH. Otherwise it is
# installed with apt-get, as root or through passwordless sudo. Always exits 0: where it
# cannot be installed the speech tests skip and say why; the build goes on.
set -u

works() {
  command -v espeak-ng >/dev/null 2>&1 && timeout 60 espeak-ng --version >/dev/null 2>&1
}

if works; then
  exit 0
fi
if [ "$(id -u)" = "0" ]; then
  AS_ROOT=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  AS_ROOT=(sudo -n)
else
  echo "install_espeak: no espeak-ng and no root or passwordless sudo to apt-get it; the speech tests will skip"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_espeak: no espeak-ng and no apt-get here; the speech tests will skip"
  exit 0
fi
echo "install_espeak: installing espeak-ng with apt-get (once)"
export DEBIAN_FRONTEND=noninteractive
"${AS_ROOT[@]}" apt-get update -qq >/dev/null 2>&1
"${AS_ROOT[@]}" apt-get install -y -qq --no-install-recommends espeak-ng >/dev/null 2>&1
if works; then
  echo "install_espeak: espeak-ng is ready"
else
  echo "install_espeak: apt-get install espeak-ng failed; the speech tests will skip"
fi
exit 0
