# SPDX-License-Identifier: Apache-2.0
# The two commands of the README:
#   make run    build napkin; check, print and evaluate examples/attention.napkin, derive it for
#               h100-sxm5 (with pseudocode and timeline) and write its report under out/
#   make test   build and run every test this machine can run (a bounded run of every fuzz target included)
# Each installs what it needs first (tools/install_deps.sh: Debian packages and PyPI only).

BUILD     := build/release
NAPKIN    := $(BUILD)/bin/napkin
# Seconds of fuzzing in all, split across the fuzz targets (tools/run_fuzz.sh).
FUZZ_SECONDS ?= 120
JOBS      ?= $(shell nproc)

.PHONY: all deps build run test fuzz golden bench clean
all: build

deps:
	@tools/install_deps.sh --cuda

build: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

run: build
	$(NAPKIN) check examples/attention.napkin
	$(NAPKIN) print examples/attention.napkin
	$(NAPKIN) eval examples/attention.napkin --set b=1 --set h=2 --set q=256 --set k=256 -o out/attention
	$(NAPKIN) derive examples/attention.napkin --machine h100-sxm5 --top 3 --pseudocode --timeline out/timeline.svg
	$(NAPKIN) report examples/attention.napkin --machine h100-sxm5 -o out/report

# Fuzz first (bounded), then the test suite, so ctest's summary is the last thing printed.
test: build fuzz
	@ctest --preset release -j $(JOBS)

fuzz: deps
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz -j $(JOBS)
	@tools/run_fuzz.sh build/fuzz/bin $(FUZZ_SECONDS)

# Rewrites golden files from the current output; review the diff before committing.
golden: build
	@NAPKIN_UPDATE_GOLDEN=1 ctest --preset release -j $(JOBS) >/dev/null || true
	@git status --short tests/golden tests/errors

# CPU benchmarks (front end, interpreter). GPU benchmarks: bench/attention (GPU machine only).
bench: build
	@for b in $(BUILD)/bench/*_bench; do echo "== $$b"; $$b; done

clean:
	rm -rf build out
