#!/usr/bin/env bash
# Make Debian's Chromium available for the report's end-to-end browser test.
# Installs it with apt-get when running as root and it is missing; otherwise prints one line.
# Always exits 0: without a browser the test skips and says why.
set -u
CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: $CHROMIUM not found and cannot apt-get install it here (need root and apt-get); the browser test will skip"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1 \
  && [ -x "$CHROMIUM" ]; then
  echo "install_browser: installed $CHROMIUM"
else
  echo "install_browser: apt-get install chromium failed; the browser test will skip"
fi
exit 0
