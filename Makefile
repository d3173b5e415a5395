# pylibbpf entry points. `make test` and `make demo` do all set-up on a fresh machine.
#
#   make setup     Debian packages, the pinned libbpf, .venv with the package and its test extras
#   make build     (re)build the CFFI extension in place when C or cdef sources changed
#   make test      build, then ruff + mypy + pytest on the real kernel (BPF tests must run)
#   make demo      trace exec events live for a few seconds with a bundled CO-RE program
#   make bench     the benchmark suite against C libbpf and bcc
#   make sanitize  the C shim's pure cores under ASan/UBSan over synthetic rings
#   make fuzz      libFuzzer on those cores, SECONDS=N per target (tests/fuzz/)

SHELL      := /bin/bash
PYTHON     ?= python3
VENV       := .venv
VPY        := $(VENV)/bin/python
APT_PKGS   := clang-19 llvm-19 bpftool libelf-dev zlib1g-dev make pkg-config dpkg-dev gcc libc6-dev systemtap-sdt-dev iproute2
LIBBPF_A   := vendor/libbpf/build/install/lib/libbpf.a
EXT_SRCS   := build_ffi.py $(wildcard cdef/*.h csrc/*.c csrc/*.h csrc/bpf/*) pylibbpf/_version.py $(LIBBPF_A)
EXT_STAMP  := .stamp-ext

.PHONY: setup deps libbpf build test lint pytest demo bench sanitize fuzz clean

setup: deps $(LIBBPF_A) $(VENV)/.stamp-venv

# Install the Debian packages the build needs, only when one is missing.
deps:
	@missing=$$(for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		if [ "$$(id -u)" != 0 ]; then SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

libbpf: $(LIBBPF_A)
$(LIBBPF_A): vendor/libbpf/PIN vendor/libbpf/build.sh vendor/libbpf/fetch.sh
	vendor/libbpf/build.sh
	@touch $@

$(VENV)/.stamp-venv: pyproject.toml setup.py | $(LIBBPF_A)
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[test]'
	@touch $(EXT_STAMP) $@

build: setup $(EXT_STAMP)
$(EXT_STAMP): $(EXT_SRCS)
	$(VPY) build_ffi.py
	@touch $@

lint: build
	$(VPY) -m ruff check .
	$(VPY) -m mypy

# pytest exit code 5 means "no tests collected": never a pass here.
pytest: build
	PYLIBBPF_REQUIRE_BPF=1 $(VPY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

test: lint sanitize pytest

demo: build
	@echo "make demo: tracing exec for 5 s while a loop starts /bin/true, ls and uname every 0.5 s"
	@( sleep 1; for i in 1 2 3 4 5 6 7 8; do /bin/true; ls / >/dev/null; uname -r >/dev/null; sleep 0.5; done ) & \
	$(VENV)/bin/pylibbpf trace exec --duration 5; rc=$$?; wait; exit $$rc

bench: build
	$(VPY) -m benchmarks --json benchmarks/results/latest.json

sanitize: deps
	$(MAKE) -s -C tests/c run
	$(MAKE) -s -C tests/fuzz replay

# libFuzzer over the same cores: SECONDS per target (default 60), see tests/fuzz/README.md.
fuzz: deps
	$(MAKE) -C tests/fuzz fuzz

clean:
	rm -rf build tests/bpf/build tests/c/build tests/fuzz/build benchmarks/build pylibbpf/_pylibbpf_cffi* pylibbpf/bpf/*.bpf.o $(EXT_STAMP)
