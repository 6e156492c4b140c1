# Thin wrapper over meson/ninja. The two commands a user needs:
#   make up    install what is missing, build, start the head (and a local agent)
#   make test  install what is missing, build, run every test
BUILD ?= build
ASAN_BUILD ?= build-asan
GPUQ_LISTEN ?= 127.0.0.1:7070
GPUQ_DATA ?= $(HOME)/.local/share/gpuq

.PHONY: all deps build asan up test bench clean fuzz

all: build

deps:
	@scripts/install-deps

$(BUILD)/build.ninja:
	meson setup $(BUILD) >/dev/null

build: deps $(BUILD)/build.ninja
	@ninja -C $(BUILD)

$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) -Db_sanitize=address,undefined -Db_lundef=false \
	    -Dbuildtype=debug >/dev/null

asan: deps $(ASAN_BUILD)/build.ninja
	@ninja -C $(ASAN_BUILD)

up: build
	@scripts/up "$(BUILD)" "$(GPUQ_LISTEN)" "$(GPUQ_DATA)"

test: build asan fuzz
	@/usr/bin/python3 tests/run.py --build $(BUILD) --asan-build $(ASAN_BUILD) --fuzz-build build-fuzz

bench: build
	@scripts/bench "$(BUILD)"

fuzz: deps
	@test -f build-fuzz/build.ninja || CC=clang meson setup build-fuzz -Dfuzz=true \
	    -Dtests=false -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
	@ninja -C build-fuzz $$(cd tests/fuzz && ls fuzz_*.c | sed 's|^|tests/fuzz/|; s|\.c$$||')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
