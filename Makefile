# sluice: the two commands a user needs are `make run` and `make test`.
# Meson + Ninja do the building; this file only names the build flavours.
#
#   make          release build, binary at build/sluice
#   make run      build, then serve examples/policy.yaml on 127.0.0.1:3128 (state in ./var,
#                 alerts in var/alerts.jsonl, /metrics on 127.0.0.1:9128)
#   make test     lint, release build (as make run has it: it must compile too), ASan+UBSan
#                 build, unit tests, fuzz corpus replay, integration tests
#   make fuzz     every libFuzzer target for FUZZ_SECONDS each (clang)
#   make bench    the benchmarks (figures as ratios)
#   make tsan     ThreadSanitizer build (build-tsan/) and its unit tests; never part of make test
#   make lint     clang-format, cppcheck and the banned-call check

FUZZ_SECONDS ?= 60
PYTEST       ?= /usr/bin/python3 -m pytest
# Integration tests mostly wait (on timeouts, slow peers, signals), so they run in
# TEST_JOBS pytest-xdist workers; those marked `serial` (they change something the
# whole machine shares) run alone afterwards. TEST_JOBS=0 runs everything in one process.
TEST_JOBS    ?= 2
POLICY       ?= examples/policy.yaml
BOOTSTRAP    := scripts/bootstrap

.PHONY: all build run test unit integration fuzz fuzz-build bench lint format clean bootstrap tsan

all: build

bootstrap:
	@$(BOOTSTRAP)

build: bootstrap
	@test -f build/build.ninja || meson setup build --buildtype=release -Dtests=false >/dev/null
	@ninja -C build

run: build
	./build/sluice serve --policy $(POLICY) --listen 127.0.0.1:3128 --log - \
	    --state var --alerts var/alerts.jsonl --admin 127.0.0.1:9128

build-test/build.ninja:
	meson setup build-test --buildtype=debug -Db_sanitize=address,undefined \
	    -Db_lundef=false -Dc_args=-fno-omit-frame-pointer >/dev/null

test: bootstrap lint build build-test/build.ninja
	@ninja -C build-test
	meson test -C build-test --print-errorlogs --suite unit --suite fuzz-replay
	$(MAKE) --no-print-directory integration SLUICE_BIN=$(CURDIR)/build-test/sluice

integration:
	SLUICE_BIN=$${SLUICE_BIN:-$(CURDIR)/build/sluice} $(PYTEST) -q -p xdist -n $(TEST_JOBS) \
	    -m 'not serial' tests/integration
	SLUICE_BIN=$${SLUICE_BIN:-$(CURDIR)/build/sluice} $(PYTEST) -q -m serial tests/integration

# The threads (the log's writer, the store's, the sinks' spawner, the log's
# reopen, the standard-error relay) under ThreadSanitizer: a build of its own,
# its unit tests with the reports collected, not fatal. Integration tests run
# against it as against any build: SLUICE_BIN=$(CURDIR)/build-tsan/sluice.
TSAN_OPTIONS ?= halt_on_error=0 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/unit/tsan.supp
build-tsan/build.ninja:
	meson setup build-tsan --buildtype=debug -Db_sanitize=thread \
	    -Db_lundef=false -Dc_args=-fno-omit-frame-pointer -Dbench=false >/dev/null

tsan: bootstrap build-tsan/build.ninja
	@ninja -C build-tsan
	TSAN_OPTIONS="$(TSAN_OPTIONS)" meson test -C build-tsan --print-errorlogs --suite unit

build-fuzz/build.ninja:
	CC=clang meson setup build-fuzz --buildtype=debugoptimized -Dfuzzing=true -Dtests=false \
	    -Dbench=false -Db_sanitize=address,undefined -Db_lundef=false >/dev/null

fuzz: bootstrap build-fuzz/build.ninja
	@ninja -C build-fuzz
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz-all build-fuzz

bench: build
	bench/run

lint: bootstrap
	@scripts/lint

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-test build-fuzz build-tsan
