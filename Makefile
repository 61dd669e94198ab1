# keymgr: `make demo` walks through keymgr on a fresh machine; `make test` runs the whole suite;
# `make bench` measures it against its baselines (not part of `make test`).
# Both install the Debian packages and Python modules they need when missing.

SWIFT_BIN ?= /opt/swift/usr/bin
export PATH := $(SWIFT_BIN):$(PATH)

APT_PACKAGES := libsqlite3-dev libssl-dev libargon2-dev pkg-config sqlite3 openssl python3 curl argon2 \
	time valgrind strace eatmydata
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build test demo bench clean

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

build: deps
	swift build

test: deps
	swift build --build-tests
	swift test --skip-build --disable-swift-testing

demo: build
	./scripts/demo.sh "$$(swift build --show-bin-path)"

# Release build in .build-release, every benchmark side by side with its baseline, one table (benchmarks/README.md).
# BENCH_FLAGS=--static links the Swift standard library statically; --quick is a smoke run.
bench: deps
	./benchmarks/run $(BENCH_FLAGS)

clean:
	rm -rf .build .build-release .build-release-static .build-bench
