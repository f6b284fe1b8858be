#!/usr/bin/env bash
# Make Debian's Chromium available for the report's end-to-end browser test (make test).
# Idempotent and quiet: nothing happens when a working /usr/bin/chromium is there. Otherwise
# it is installed with apt-get, as root or through passwordless sudo. Always exits 0: where
# Chromium cannot be installed the browser test skips and says why; the build goes on.
set -u
CHROMIUM=/usr/bin/chromium

works() {
  [ -x "$CHROMIUM" ] && timeout 60 "$CHROMIUM" --headless --no-sandbox --version >/dev/null 2>&1
}

if works; then
  exit 0
fi
if [ "$(id -u)" = "0" ]; then
  AS_ROOT=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  AS_ROOT=(sudo -n)
else
  echo "install_browser: no working $CHROMIUM and no root or passwordless sudo to apt-get it; the browser test will skip"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: no working $CHROMIUM and no apt-get here; the browser test will skip"
  exit 0
fi
echo "install_browser: installing chromium with apt-get (once)"
export DEBIAN_FRONTEND=noninteractive
"${AS_ROOT[@]}" apt-get update -qq >/dev/null 2>&1
"${AS_ROOT[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1
if works; then
  echo "install_browser: $CHROMIUM is ready"
else
  echo "install_browser: apt-get install chromium failed or $CHROMIUM does not start; the browser test will skip"
fi
exit 0
