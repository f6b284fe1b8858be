#!/usr/bin/env bash
# The tests that compare numbers (marker numerics: tests/numerics.py) again under each CPU
# kernel set torch and MKL can be forced to: ATen's scalar code (default), AVX2, AVX-512 where
# the processor has it, and MKL's COMPATIBLE code path. A test whose outcome changes with the
# kernel set is a bug in the test or in the code. The processor's own ATen set already ran in
# `make test` / `make test-slow` and is not run twice.
# usage: scripts/test_kernels.sh PYTHON [pytest -m expression]
set -euo pipefail
py=$1
select=${2:-numerics and not gpu}
capability() { "$py" -c "import torch; print(torch.backends.cpu.get_cpu_capability().lower())"; }
native=$(capability)
sets="default avx2"
grep -qw avx512f /proc/cpuinfo && sets="$sets avx512"
run() {  # label, then the environment assignments
    local label=$1 start=$SECONDS
    shift
    echo "== $label: pytest -m \"$select\""
    env "$@" OMP_NUM_THREADS=1 "$py" -m pytest -n 2 -q -p no:cacheprovider -m "$select"
    echo "== $label: $((SECONDS - start)) s"
}
for k in $sets; do
    if [ "$k" = "$native" ]; then
        echo "== ATEN_CPU_CAPABILITY=$k: this processor's own set, already run by make test"
        continue
    fi
    got=$(ATEN_CPU_CAPABILITY=$k capability)
    if [ "$got" != "$k" ]; then
        echo "ATEN_CPU_CAPABILITY=$k: torch runs $got instead; cannot test this kernel set" >&2
        exit 2
    fi
    run "ATEN_CPU_CAPABILITY=$k" ATEN_CPU_CAPABILITY=$k
done
run "MKL_CBWR=COMPATIBLE" MKL_CBWR=COMPATIBLE
