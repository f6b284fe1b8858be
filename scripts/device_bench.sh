#!/usr/bin/env bash
# The GPU suite on the lent device machine, in one command (benchmarks/README.md, "On the
# lent device machine"): installs the carried wheels of .device-wheels/ and mechscope
# itself with --no-deps (no registry there), runs the CUDA decode-step tests, then benchmarks/gpu_suite.py within what is left
# of SECONDS_LEFT (default 560 s), and leaves RESULTS-gpu.md, results-gpu.json and the logs
# under $OUT. The last lines it prints are the results table.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
OUT=${OUT:-/tmp/mechscope-gpu}
PY=${PYTHON:-python3}
SECONDS_LEFT=${SECONDS_LEFT:-560}
mkdir -p "$OUT"
log="$OUT/device-bench.log"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MECHSCOPE_PROGRESS=0 TQDM_DISABLE=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # this tree's mechscope, whatever else
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    "$PY" -m pip install --no-deps --no-index --quiet --disable-pip-version-check \
        .device-wheels/*.whl
    # mechscope itself, without its dependencies (the image and the wheels hold them)
    "$PY" -m pip install --no-deps --no-index --no-build-isolation --quiet \
        --disable-pip-version-check -e .
    "$PY" - <<'PYEOF'
import importlib
for name in ("torch", "transformers", "mechscope", "transformer_lens", "nnsight", "captum"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as exc:  # the suite reports a missing peer in its rows
        print(name, "NOT IMPORTABLE:", type(exc).__name__, str(exc)[:200])
import torch
print("cuda", torch.version.cuda, torch.cuda.get_device_name())
PYEOF
} >"$log" 2>&1
cat "$log"
if [ -z "${SKIP_TESTS:-}" ]; then
    MECHSCOPE_STORIES=.device-wheels/stories260K timeout 150 "$PY" -m pytest -q -p no:cacheprovider \
        -m gpu tests/engine/test_generate_gpu.py >"$OUT/test-generate-gpu.log" 2>&1
    echo "decode-step tests on CUDA: exit $? ($(tail -1 "$OUT/test-generate-gpu.log"))"
fi
left=$(( SECONDS_LEFT - ($(date +%s) - START) - 20 ))
budget=$(( left < 480 ? left : 480 ))
echo "suite budget ${budget} s"
timeout $((budget + 60)) "$PY" benchmarks/gpu_suite.py --out-dir "$OUT" --budget "$budget" \
    ${SUITE_ARGS:-} >"$OUT/gpu-suite.log" 2>&1
rc=$?
cp "$OUT"/RESULTS-gpu.md "$OUT"/results-gpu.json benchmarks/ 2>/dev/null
grep -E "^== |FAIL|Error" "$OUT/gpu-suite.log" | tail -20
sed -n '/^## Results/,$p' "$OUT/RESULTS-gpu.md" 2>/dev/null | cut -c1-400
echo "gpu_suite exit $rc; total $(( $(date +%s) - START )) s"
exit $rc
