# Thin wrapper over meson/ninja. The two commands a user needs:
#   make up    install what is missing, build, start the head (and a local agent)
#   make test  install what is missing, build, run every test
BUILD ?= build
ASAN_BUILD ?= build-asan
GPUQ_LISTEN ?= 127.0.0.1:7070
GPUQ_DATA ?= $(or $(XDG_DATA_HOME),$(HOME)/.local/share)/gpuq
# make install: PREFIX and DESTDIR as usual (DESTDIR stages the tree elsewhere).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
DOCDIR ?= $(PREFIX)/share/doc/gpuq
UNITDIR ?= $(PREFIX)/lib/systemd/system
INSTALL_BINS = gpuqd gpuq gpuq-agent gpuq-sim gpuq-sim-runtime

.PHONY: all deps build asan up test bench clean fuzz install

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

# Installs what `make build` made, without rebuilding (run it as root after
# a build as yourself): the binaries, the example configs (an existing
# config is kept), the docs, and the systemd units with their paths filled in.
install:
	@for b in $(INSTALL_BINS); do \
	    test -x $(BUILD)/$$b || { echo "install: $(BUILD)/$$b is missing; run make first" >&2; exit 1; }; \
	done
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSCONFDIR)/gpuq $(DESTDIR)$(DOCDIR)/docs/api \
	    $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(UNITDIR)
	install -m 0755 $(addprefix $(BUILD)/,$(INSTALL_BINS)) $(DESTDIR)$(BINDIR)/
	test ! -x $(BUILD)/gpuq-cuda-runtime || install -m 0755 $(BUILD)/gpuq-cuda-runtime $(DESTDIR)$(BINDIR)/
	install -m 0644 etc/gpuqd.conf etc/agent.conf $(DESTDIR)$(DOCDIR)/examples/
	install -m 0600 etc/agent.env $(DESTDIR)$(DOCDIR)/examples/
	test -e $(DESTDIR)$(SYSCONFDIR)/gpuq/gpuqd.conf || install -m 0644 etc/gpuqd.conf $(DESTDIR)$(SYSCONFDIR)/gpuq/
	test -e $(DESTDIR)$(SYSCONFDIR)/gpuq/agent.conf || install -m 0644 etc/agent.conf $(DESTDIR)$(SYSCONFDIR)/gpuq/
	test -e $(DESTDIR)$(SYSCONFDIR)/gpuq/agent.env || install -m 0600 etc/agent.env $(DESTDIR)$(SYSCONFDIR)/gpuq/
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	install -m 0644 docs/api/* $(DESTDIR)$(DOCDIR)/docs/api/
	for u in gpuqd gpuq-agent; do \
	    sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' \
	        etc/systemd/$$u.service >$(DESTDIR)$(UNITDIR)/$$u.service && \
	    chmod 0644 $(DESTDIR)$(UNITDIR)/$$u.service; \
	done
	@echo "installed under $(DESTDIR)$(PREFIX); units in $(DESTDIR)$(UNITDIR) (systemctl daemon-reload)"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
