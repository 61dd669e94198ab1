# keymgr: `make demo` walks through keymgr on a fresh machine; `make test` runs the whole suite; `make check` its fast tier;
# `make install [PREFIX=/usr/local] [DESTDIR=]` installs a release build with its man page, the agent's systemd units,
# sysusers.d and tmpfiles.d files and (when absent) the policy /etc/keymgr/policy.toml; `make uninstall` removes them;
# `make deb` builds the Debian package of the same build (docs/output-and-packaging.md);
# `make bench` measures keymgr against its baselines (not part of `make test`).
# They install the Debian packages and Python modules they need when missing.

SWIFT_BIN ?= /opt/swift/usr/bin
export PATH := $(SWIFT_BIN):$(PATH)

# Everything a build, a test or a script calls: libcurl4-openssl-dev has the curl headers of the CCurl shim
# (libcurl itself is loaded on first network use), argon2 is the tests' reference CLI, systemd brings
# systemd-analyze (the unit tests) and systemd-sysusers (the package's postinst), make and bsdutils (`script`) are
# called by tests and demo; time, valgrind, strace and eatmydata are the benchmarks'; man-db renders the man page in
# its test, dpkg-dev and lintian build and check `make deb`; systemd-container (systemd-nspawn) and debootstrap boot
# a real systemd in a container for the agent's deployment test; libnss-wrapper resolves the test's temporary OS
# users for the agent; softhsm2 and opensc are the agent benchmark's peer (a PKCS#11 token per user, pkcs11-tool); binutils' nm shows
# which libraries the lean client links.
APT_PACKAGES := libsqlite3-dev libssl-dev libargon2-dev libcurl4-openssl-dev pkg-config sqlite3 openssl \
	python3 python3-pip curl argon2 systemd make bsdutils time valgrind strace eatmydata man-db dpkg-dev lintian \
	swtpm swtpm-tools tpm2-tools libtss2-dev tpm2-openssl \
	systemd-container debootstrap libnss-wrapper softhsm2 opensc binutils acl
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

PREFIX ?= /usr/local
DESTDIR ?=
BINDIR := $(PREFIX)/bin
# keymgr-core, the full program the client runs in embedded mode (and that runs the agent), is not on PATH.
LIBEXECDIR := $(PREFIX)/libexec/keymgr
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
# systemd-sysusers and systemd-tmpfiles read /usr/local/lib/… as well as /usr/lib/….
SYSUSERS_DIR ?= $(PREFIX)/lib/sysusers.d
TMPFILES_DIR ?= $(PREFIX)/lib/tmpfiles.d
# /etc whatever the PREFIX: the agent reads /etc/keymgr/policy.toml.
SYSCONFDIR ?= /etc
POLICY := $(SYSCONFDIR)/keymgr/policy.toml
BASH_COMPLETION_DIR := $(PREFIX)/share/bash-completion/completions
ZSH_COMPLETION_DIR := $(PREFIX)/share/zsh/site-functions
FISH_COMPLETION_DIR := $(PREFIX)/share/fish/vendor_completions.d
MAN_DIR := $(PREFIX)/share/man/man1
MAN5_DIR := $(PREFIX)/share/man/man5
# The README and docs/, where keymgr(1), keymgr-policy(5) and the policy's comments send readers.
DOC_DIR := $(PREFIX)/share/doc/keymgr
DOCS := README.md $(wildcard docs/*.md)
# The release build has its own scratch path, so it never disturbs the debug build of `make test`.
RELEASE_SCRATCH ?= .build-release
# Two products: `keymgr`, the lean client (Sources/keymgr-client), and `keymgr-core`, the full program (Sources/keymgr).
RELEASE_BIN = $(RELEASE_SCRATCH)/release/keymgr
RELEASE_CORE = $(RELEASE_SCRATCH)/release/keymgr-core
# keymgr(1), written from the release binary's own help (scripts/manpage.py).
MANPAGE = $(RELEASE_SCRATCH)/keymgr.1
VERSION := $(shell sed -n 's/.*static let current = "\(.*\)".*/\1/p' Sources/keymgr/Version.swift)
DEB = $(RELEASE_SCRATCH)/keymgr_$(VERSION)_amd64.deb

# Exactly what `make install` writes and `make uninstall` removes.
INSTALLED := $(BINDIR)/keymgr $(LIBEXECDIR)/keymgr-core \
	$(BASH_COMPLETION_DIR)/keymgr $(ZSH_COMPLETION_DIR)/_keymgr $(FISH_COMPLETION_DIR)/keymgr.fish $(MAN_DIR)/keymgr.1 \
	$(MAN5_DIR)/keymgr-policy.5 $(addprefix $(DOC_DIR)/,$(notdir $(DOCS))) \
	$(SYSTEMD_UNIT_DIR)/keymgr-sync.service $(SYSTEMD_UNIT_DIR)/keymgr-sync.timer \
	$(SYSTEMD_UNIT_DIR)/keymgr.socket $(SYSTEMD_UNIT_DIR)/keymgr.service \
	$(SYSUSERS_DIR)/keymgr.conf $(TMPFILES_DIR)/keymgr.conf
# The units name the installed programs through these placeholders.
UNIT_PATHS := sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@LIBEXECDIR@|$(LIBEXECDIR)|g'

.PHONY: all deps build test test-release debug-tests container-rootfs check demo bench clean release install uninstall stress fuzz man deb

all: build

# Installs only what is missing, so a machine that has everything needs no network.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@python3 -c 'import cryptography' 2>/dev/null || python3 -m pip install --quiet cryptography

# Every debug build (make build, check, test, stress, demo) is made without debug information: the tests and the
# demo never read it, and it is about a sixth of the debug build's CPU (a debug build of Hummingbird alone, fresh:
# 270 CPU s with it, 224 without; docs/testing.md, "The builds"). Every debug `swift build` here passes the same
# flags, so going from one target to another never rebuilds; a plain `swift build` would rebuild with DWARF, for
# lldb. `make DEBUG_BUILD_FLAGS= check` keeps it.
DEBUG_BUILD_FLAGS ?= -debug-info-format none

build: deps
	swift build $(DEBUG_BUILD_FLAGS)

# The whole suite (scripts/make-test.sh, docs/testing.md): the release build (and its man page) once, for the tests
# that install, package or boot it (they find it up to date and never rebuild it), then every test, in parallel, one
# process per test (scripts/run-tests.sh); the run ends with the 20 slowest tests, the time per target and where the
# time went (deps, each build, each run of the tests, in wall and CPU seconds).
# The release build (test-release) runs in the background from the start, beside the debug build with tests and, if
# it is still running then, beside the tests that need nothing of it: it is a chain of whole-module compiles (GRDB,
# then Storage, KeyManager, ServerClients, Sync, keymgr), one compiler at a time for most of its length.
# The process tests run the release build's keymgr and keymgr-core (KEYMGR_BIN, KEYMGR_CORE_BIN): what is shipped,
# and 2-6 times less CPU per run than the debug build's, whose argument parser checks every command's definition at
# each parse; the reference server stays the debug one. TEST_BINARIES=debug runs them on the debug build instead.
# The classes that run keymgr in the test process for `make check` (Sandbox.CLIRun) run so beside the release build
# while it is being made; if it is done first, they run as its processes (KEYMGR_TEST_CLI=process), which costs less:
# in the debug-built test process the same 153 tests took 130 s wall and 198 CPU s, as processes of the release build
# 104 s and 137 CPU s (2026-11-28, one after the other).
TEST_BINARIES ?= release
test:
	@MAKE='$(MAKE)' RELEASE_BIN=$(CURDIR)/$(RELEASE_BIN) RELEASE_CORE=$(CURDIR)/$(RELEASE_CORE) \
	  TEST_BINARIES=$(TEST_BINARIES) ./scripts/make-test.sh

test-release: release $(MANPAGE) container-rootfs

# The Debian root file system the booted-systemd test boots (scripts/container-rootfs.sh), made beside the compiles
# (make -j2 test-release): debootstrap waits on the Debian mirror for most of its time (measured 2026-11-28: 195 s
# wall for 61 CPU s), which the test otherwise spent at the end of the run, alone. The test finds it complete and
# uses it as it is; if it failed here, the test builds it again and reports why.
container-rootfs:
	-@sh scripts/container-rootfs.sh .build-container/rootfs >/dev/null

debug-tests:
	swift build --build-tests $(DEBUG_BUILD_FLAGS)

# The fast tier, for every edit (docs/testing.md): the in-process targets (Storage, KeyManager without the TPM,
# AgentWire, ServerClients, Sync, RefServer), keymgr's in-process tests and the smoke runs of the real binaries.
# The CLI's classes that run keymgr in the test process (Sandbox.CLIRun.inProcess, docs/testing.md), but the two
# fault suites, which wait on slow servers, and the audit log's million-entry pipeline of binaries.
CHECK_CLI := CommandTests|ReadOnlyCommandTests|OperatorCommandTests|TableWidthTests|UserIdTests|BadInputTests|AuditLogTests|AuditArchiveTests|TamperingTests|SchemaWalkTamperingTests|AuditAndInputTamperingTests|PINTests|StoreSafetyTests|OAuthCommandTests|OAuthEdgeTests|OAuthlibInteropTests|AdminCommandTests|SyncCommandTests|JourneyCommandTests|JourneyUserBoundaryTests|ServerGivenURITests|MissingProfileTests|RequestContextPerRunTests|ReadsPerRequestTests
CHECK_TESTS := ^(StorageTests|KeyManagerTests|AgentWireTests|ServerClientsTests|SyncTests|RefServerTests)\.|^keymgrTests\.(SmokeTests|LayoutTests|HotPathParserTests|PolicyTemplateTests|SharedDeviceTests|$(CHECK_CLI))/
CHECK_SKIP := ^KeyManagerTests\.TPM|^keymgrTests\.AuditLogTests/testALogLongerThanOneBufferStreamsWhole
check: deps
	swift build --build-tests $(DEBUG_BUILD_FLAGS)
	@./scripts/run-tests.sh .build/check-results.xml --filter '$(CHECK_TESTS)' --skip '$(CHECK_SKIP)'

# The crash and soak harness (proof/stress.py): at least 220 SIGKILLs during bind, rebind, revoke, pin change,
# sync, master rotate, dcr register, login, token refresh and import, each followed by checks of the store, then a
# four-process soak. `make test` runs its
# short form (StressHarnessTests). STRESS_ARGS passes options, e.g. STRESS_ARGS="--seed 42" to replay a run.
stress: deps
	swift build $(DEBUG_BUILD_FLAGS)
	python3 proof/stress.py --bin-dir "$$(swift build --show-bin-path)" $(STRESS_ARGS)

# libFuzzer targets (Sources/keymgr-fuzz, built into .build-fuzz): FUZZ_SECONDS per target (default 45).
# Not part of `make test`.
fuzz: deps
	./proof/fuzz.sh

demo: build
	./scripts/demo.sh "$$(swift build --show-bin-path)"

# The static Swift standard library (and Foundation) is linked in: the binary runs without the toolchain.
# A file target: make skips swift build (about two minutes even when nothing changed, as the migrations plugin
# re-runs) unless a source is newer than the binary.
RELEASE_SOURCES := Package.swift $(shell find Sources Plugins migrations -type f 2>/dev/null)

release: $(RELEASE_BIN)

# Both products from one target (the client is useless without keymgr-core beside it or in libexec).
$(RELEASE_BIN): $(RELEASE_SOURCES)
	@$(MAKE) --no-print-directory deps
	swift build -c release --static-swift-stdlib --scratch-path $(RELEASE_SCRATCH) --product keymgr-core
	swift build -c release --static-swift-stdlib --scratch-path $(RELEASE_SCRATCH) --product keymgr
	@touch $(RELEASE_CORE) $@

man: $(MANPAGE)

# From keymgr-core directly: the client would ask an agent when the machine building this runs one.
$(MANPAGE): $(RELEASE_BIN) scripts/manpage.py
	python3 scripts/manpage.py --prefix $(PREFIX) $(RELEASE_CORE) > $@.tmp
	mv $@.tmp $@

install: release $(MANPAGE)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(BASH_COMPLETION_DIR) $(DESTDIR)$(ZSH_COMPLETION_DIR) \
	  $(DESTDIR)$(FISH_COMPLETION_DIR) $(DESTDIR)$(SYSTEMD_UNIT_DIR) $(DESTDIR)$(MAN_DIR)
	install -m 0755 $(RELEASE_BIN) $(DESTDIR)$(BINDIR)/keymgr
	install -m 0755 $(RELEASE_CORE) $(DESTDIR)$(LIBEXECDIR)/keymgr-core
	install -m 0644 $(MANPAGE) $(DESTDIR)$(MAN_DIR)/keymgr.1
	install -D -m 0644 contrib/man/keymgr-policy.5 $(DESTDIR)$(MAN5_DIR)/keymgr-policy.5
	install -d $(DESTDIR)$(DOC_DIR)
	install -m 0644 $(DOCS) $(DESTDIR)$(DOC_DIR)/
	$(RELEASE_CORE) --generate-completion-script bash > $(DESTDIR)$(BASH_COMPLETION_DIR)/keymgr
	$(RELEASE_CORE) --generate-completion-script zsh > $(DESTDIR)$(ZSH_COMPLETION_DIR)/_keymgr
	$(RELEASE_CORE) --generate-completion-script fish > $(DESTDIR)$(FISH_COMPLETION_DIR)/keymgr.fish
	chmod 0644 $(DESTDIR)$(BASH_COMPLETION_DIR)/keymgr $(DESTDIR)$(ZSH_COMPLETION_DIR)/_keymgr \
	  $(DESTDIR)$(FISH_COMPLETION_DIR)/keymgr.fish
	for unit in keymgr.socket keymgr.service keymgr-sync.service keymgr-sync.timer; do \
	  $(UNIT_PATHS) contrib/systemd/$$unit > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$$unit && \
	  chmod 0644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$$unit || exit 1; \
	done
	install -D -m 0644 contrib/sysusers.d/keymgr.conf $(DESTDIR)$(SYSUSERS_DIR)/keymgr.conf
	install -D -m 0644 contrib/tmpfiles.d/keymgr.conf $(DESTDIR)$(TMPFILES_DIR)/keymgr.conf
	@# The policy is the administrator's once installed: never overwritten.
	@if [ -e $(DESTDIR)$(POLICY) ]; then echo "keeping $(DESTDIR)$(POLICY) (the template is contrib/policy.toml)"; \
	  else install -D -m 0644 contrib/policy.toml $(DESTDIR)$(POLICY); fi

# The policy goes only as installed: an edited one is kept, and said so.
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	@if [ -e $(DESTDIR)$(POLICY) ]; then \
	  if cmp -s contrib/policy.toml $(DESTDIR)$(POLICY); then rm -f $(DESTDIR)$(POLICY); \
	  else echo "keeping $(DESTDIR)$(POLICY): it differs from the template"; fi; fi
	-@rmdir $(DESTDIR)$(SYSCONFDIR)/keymgr 2>/dev/null
	-rmdir $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(DOC_DIR) 2>/dev/null

# The Debian package of the release binary, its man page, completions and systemd units (scripts/deb.sh), in
# $(DEB). Dependencies are the packages that own the libraries the binary links and loads, found with ldd and dpkg -S.
# A file target, built under a lock: two runs at once (the tests that install the package run in parallel) build it
# once, the second finding it up to date; so does any later run until the release build or a packaged file changes.
DEB_INPUTS := $(RELEASE_BIN) $(MANPAGE) Makefile scripts/deb.sh scripts/manpage.py $(DOCS) \
	$(shell find contrib -type f 2>/dev/null)
deb: release $(MANPAGE)
	@flock $(DEB).lock $(MAKE) --no-print-directory $(DEB)
	@echo $(DEB)

$(DEB): $(DEB_INPUTS)
	./scripts/deb.sh $(RELEASE_BIN) $(RELEASE_CORE) $(MANPAGE) $(VERSION) $@ >/dev/null

# Static release build in .build-bench-release (make install keeps .build-release), every benchmark side by side
# with its baseline, one table (benchmarks/README.md).
# BENCH_FLAGS=--dynamic links the Swift runtime dynamically instead; --quick is a smoke run.
bench: deps
	./benchmarks/run $(BENCH_FLAGS)

clean:
	rm -rf .build $(RELEASE_SCRATCH) .build-release-static .build-bench .build-bench-release .build-bench-release-dynamic .build-fuzz \
	  .build-container
