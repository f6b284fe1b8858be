#!/usr/bin/env bash
# What the GPU suite needs on the lent device machine, which has no package registry:
# the Python 3.12 wheels of benchmarks/device-wheels.txt and stories260K (the decode-step
# tests' model), into .device-wheels/ (git-ignored: the
# device call names it in `carry`). Prints each file's size and the total, and fails when
# the total would not fit the 64 MiB a call may carry beside the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=.device-wheels
STORIES=${MECHSCOPE_STORIES:-../shared/models/stories260K}
rm -rf "$OUT"
mkdir -p "$OUT"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
    -d "$OUT" -r benchmarks/device-wheels.txt
if [ -f "$STORIES/config.json" ]; then
    cp -r "$STORIES" "$OUT/stories260K"
fi
du -ab "$OUT" | sort -n | awk '{printf "%10.2f MiB  %s\n", $1 / 1048576, $2}'
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
total=$(( $(du -sb "$OUT" | cut -f1) + tree ))
printf 'carried %.1f MiB with the working tree (limit 64 MiB)\n' "$(echo "$total / 1048576" | bc -l)"
[ "$total" -lt $((60 * 1048576)) ] || { echo "too large to carry" >&2; exit 1; }
