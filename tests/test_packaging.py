"""Installing like a Python package: the manylinux wheel on a PATH without clang, the sdist offline.

The slow tests build once per session (`make wheel`, `make sdist`) and install
into fresh virtual environments under pytest's tmp directory; the wheels they
need besides ours (cffi, pycparser, setuptools, wheel) are downloaded once per
session into a local wheelhouse, so the installs themselves need no index.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PIN = dict(line.split("=", 1) for line in (ROOT / "vendor" / "libbpf" / "PIN").read_text().splitlines()
           if line and not line.startswith("#"))
LIBBPF_TARBALL = f"libbpf_{PIN['LIBBPF_VERSION']}.orig.tar.gz"
BUNDLED = ("exec", "exit", "open")
# The distribution's own dependencies, as pyproject.toml lists them.
RUNTIME_DEPENDENCIES = re.findall(r'"([^"]+)"', (ROOT / "pyproject.toml").read_text()
                                  .split("\ndependencies = [", 1)[1].split("\n]", 1)[0])
# A build tool a user without a BPF tool chain lacks: removed from the PATH the installs see.
HIDDEN = ("clang", "bpftool", "llvm")


def make_env() -> dict[str, str]:
    """This environment without the variables of an enclosing `make` (its jobserver fds are not ours)."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


def run(cmd: list[str], *, timeout: float = 900, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run to completion; fail the test with the command's output tail when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=env, cwd=cwd)
    assert proc.returncode == 0, (f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                                  f"{proc.stderr[-3000:]}")
    return proc


def newest(directory: Path, pattern: str) -> Path:
    found = sorted(directory.glob(pattern), key=lambda p: p.stat().st_mtime)
    assert found, f"nothing matches {directory / pattern}"
    return found[-1]


@pytest.fixture(scope="session")
def path_without_clang(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH with every program of this machine's bin directories except clang*, bpftool*, llvm*."""
    farm = tmp_path_factory.mktemp("bin-without-clang")
    for directory in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = farm / entry.name
            if not entry.name.startswith(HIDDEN) and not link.exists() and not link.is_symlink():
                link.symlink_to(entry.path)
    path = str(farm)
    assert shutil.which("clang-19", path=path) is None and shutil.which("cc", path=path) is not None
    return path


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of our dependencies and build requirements, for installs with --no-index."""
    house = tmp_path_factory.mktemp("wheelhouse")
    run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--dest", str(house),
         *RUNTIME_DEPENDENCIES, "pycparser", "setuptools>=77", "wheel"], timeout=600)
    return house


def venv(where: Path, wheelhouse: Path, *packages: str) -> Path:
    """A fresh virtual environment (this interpreter's version) with ``packages`` from the wheelhouse."""
    run([sys.executable, "-m", "venv", str(where)], timeout=300)
    if packages:
        run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links",
             str(wheelhouse), *packages])
    return where


def make_dist(target: str, pattern: str) -> Path:
    """Run ``make TARGET`` and return the file of dist/ it made."""
    started = time.time()
    run(["make", "-s", target], cwd=ROOT, env=make_env())
    built = newest(ROOT / "dist", pattern)
    assert built.stat().st_mtime >= started - 1, f"make {target} left no new {pattern} in dist/"
    return built


@pytest.fixture(scope="session")
def wheel() -> Path:
    """`make wheel`, once per session: the repaired wheel."""
    return make_dist("wheel", "*.whl")


@pytest.fixture(scope="session")
def sdist() -> Path:
    """`make sdist`, once per session."""
    return make_dist("sdist", "*.tar.gz")


def trace_one_exec(command: Path, env: dict[str, str], cwd: Path) -> dict[str, str]:
    """Run ``command trace exec --json`` filtered to a uniquely named program, exec it, return its event."""
    comm = f"plbw{os.getpid()}"[:15]
    program = cwd / comm
    shutil.copy("/bin/true", program)
    tracer = subprocess.Popen([str(command), "trace", "exec", "--json", "--comm", comm, "--duration", "120"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env, cwd=cwd)
    assert tracer.stdout is not None and tracer.stderr is not None
    try:
        ready = b""
        deadline = time.monotonic() + 120
        while b"tracing exec" not in ready:
            assert time.monotonic() < deadline, f"the tracer did not start: {ready!r}"
            assert tracer.poll() is None, f"the tracer ended: {ready + tracer.stderr.read()!r}"
            if select.select([tracer.stderr], [], [], 1.0)[0]:
                ready += os.read(tracer.stderr.fileno(), 4096)
        out = b""
        while b"\n" not in out:
            assert time.monotonic() < deadline, "no exec event seen"
            subprocess.run([str(program)], check=True)
            if select.select([tracer.stdout], [], [], 1.0)[0]:
                out += os.read(tracer.stdout.fileno(), 65536)
    finally:
        tracer.kill()
        tracer.communicate()
    event: dict[str, str] = json.loads(out.split(b"\n", 1)[0])
    return event


# --- the wheel -------------------------------------------------------------------------------

@pytest.mark.slow
def test_wheel_is_manylinux_with_libelf_zlib_and_the_bundled_objects(wheel: Path) -> None:
    assert "-abi3-manylinux_" in wheel.name, wheel.name  # one wheel for CPython 3.10 and later
    names = zipfile.ZipFile(wheel).namelist()
    for tool in BUNDLED:
        assert f"pylibbpf/bpf/{tool}.bpf.o" in names
    assert "pylibbpf/include/bpf/bpf_helpers.h" in names
    assert "pylibbpf/include/pylibbpf/bpf_tools.h" in names
    libs = [n for n in names if n.startswith("pylibbpf_cffi.libs/")]
    assert any("/libelf" in n for n in libs) and any("/libz" in n for n in libs), libs


@pytest.mark.slow
def test_wheel_installs_and_traces_without_clang(wheel: Path, wheelhouse: Path, path_without_clang: str,
                                                 tmp_path: Path, bpf_privileged: None) -> None:
    env_dir = venv(tmp_path / "venv", wheelhouse)
    run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links",
         str(wheelhouse), str(wheel)])
    env = {k: v for k, v in make_env().items() if k not in ("PYTHONPATH", "CLANG", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}:{path_without_clang}"
    assert shutil.which("clang", path=env["PATH"]) is None
    # The installed package (not this tree) with libelf and zlib from the wheel.
    probe = run([str(env_dir / "bin" / "python"), "-c",
                 "import pylibbpf; print(pylibbpf.__file__); print(pylibbpf.libbpf_version()); "
                 "print(open('/proc/self/maps').read())"], env=env, cwd=tmp_path)
    where, version, maps = probe.stdout.split("\n", 2)
    assert where.startswith(str(env_dir)) and version == "1.5.0"
    mapped = {line.split()[-1] for line in maps.splitlines() if ".so" in line}
    assert any("pylibbpf_cffi.libs/libelf" in m for m in mapped), mapped
    assert any("pylibbpf_cffi.libs/libz" in m for m in mapped), mapped
    event = trace_one_exec(env_dir / "bin" / "pylibbpf", env, tmp_path)
    assert event["comm"] == f"plbw{os.getpid()}"[:15] and event["filename"].endswith(event["comm"])


# --- the sdist -------------------------------------------------------------------------------

@pytest.mark.slow
def test_sdist_holds_what_the_build_needs(sdist: Path) -> None:
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    needed = {"build_ffi.py", "setup.py", "pyproject.toml", "MANIFEST.in", "tools/build_bpf.py", "tools/graft_zlib.py",
              "vendor/libbpf/PIN", "vendor/libbpf/build.sh", "vendor/libbpf/fetch.sh",
              f"vendor/libbpf/build/{LIBBPF_TARBALL}", "csrc/pylibbpf_shim.h", "csrc/bpf/tools.h",
              "pylibbpf/include/bpf/bpf_helpers.h", "pylibbpf/include/pylibbpf/bpf_tools.h", "pylibbpf/py.typed"}
    needed |= {f"cdef/{p.name}" for p in (ROOT / "cdef").glob("*.h")}
    needed |= {f"csrc/{p.name}" for p in (ROOT / "csrc").glob("*.[ch]")}
    needed |= {f"csrc/bpf/{t}.bpf.c" for t in BUNDLED} | {f"pylibbpf/bpf/{t}.bpf.o" for t in BUNDLED}
    assert not needed - names, sorted(needed - names)
    assert not [n for n in names if n.startswith(("vendor/libbpf/build/install", "vendor/libbpf/build/src"))]
    assert not [n for n in names if n.endswith(".so")]


@pytest.mark.slow
def test_sdist_installs_offline_without_clang(sdist: Path, wheelhouse: Path, path_without_clang: str,
                                              tmp_path: Path, bpf_privileged: None) -> None:
    """pip install of the sdist in a network namespace of its own (no network at all), with only a C
    compiler, make and the libelf/zlib headers: libbpf is built from the bundled, verified tarball,
    and without clang the sdist's prebuilt CO-RE objects are installed."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is missing: `make setup` installs it")
    env_dir = venv(tmp_path / "venv", wheelhouse, "setuptools>=77", "wheel", *RUNTIME_DEPENDENCIES)
    env = {k: v for k, v in make_env().items() if k not in ("PYTHONPATH", "CLANG", "LIBBPF_TARBALL", "LIBBPF_SRC")}
    env["PATH"] = f"{env_dir / 'bin'}:{path_without_clang}"
    run(["unshare", "-n", str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-cache-dir",
         "--no-build-isolation", "--no-index", str(sdist)], env=env, cwd=tmp_path, timeout=1800)
    probe = run([str(env_dir / "bin" / "python"), "-c",
                 "import pathlib, pylibbpf; print(pylibbpf.libbpf_version()); "
                 "print(pathlib.Path(pylibbpf.__file__).parent)"], env=env, cwd=tmp_path)
    version, package = probe.stdout.split()
    assert version == "1.5.0"
    assert package.startswith(str(env_dir))
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/", 1)[0]
        for tool in BUNDLED:
            member = tar.extractfile(f"{top}/pylibbpf/bpf/{tool}.bpf.o")
            assert member is not None
            assert (Path(package) / "bpf" / f"{tool}.bpf.o").read_bytes() == member.read(), tool
    assert (Path(package) / "include" / "bpf" / "bpf_tracing.h").is_file()


@pytest.mark.slow
def test_sdist_refuses_a_tampered_libbpf(sdist: Path, tmp_path: Path) -> None:
    """The bundled tarball is verified at build time: one changed byte stops the build before make."""
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data") if sys.version_info >= (3, 12) else tar.extractall(tmp_path)
    (tree,) = tmp_path.iterdir()
    tarball = tree / "vendor" / "libbpf" / "build" / LIBBPF_TARBALL
    data = bytearray(tarball.read_bytes())
    data[-1] ^= 0xFF
    tarball.write_bytes(bytes(data))
    env = {k: v for k, v in make_env().items() if k not in ("LIBBPF_TARBALL", "LIBBPF_SRC")}
    proc = subprocess.run(["unshare", "-n", str(tree / "vendor" / "libbpf" / "build.sh")], capture_output=True,
                          text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    assert "sha256 mismatch" in proc.stderr
    assert not (tree / "vendor" / "libbpf" / "build" / "install").exists()


# --- first run -------------------------------------------------------------------------------

# A private mount namespace whose tracefs paths are covered by an empty tmpfs owned by another uid
# (mode 0700), then the command with CAP_BPF and CAP_PERFMON only and the no-root securebits: root's uid
# grants nothing, so tracefs is unreadable as it is to a non-root user. The uid stays 0, so the command
# reaches the checkout and its .venv wherever the clone lives (another uid could not enter a 0700 folder).
_BPF_CAPS_ONLY = r"""
mount --make-rprivate /
for d in /sys/kernel/tracing /sys/kernel/debug/tracing; do
    [ -d "$d" ] && mount -t tmpfs -o mode=0700,uid=12345,gid=12345 plbtest "$d"
done
exec setpriv --inh-caps=-all,+bpf,+perfmon --ambient-caps=-all,+bpf,+perfmon --bounding-set=-all,+bpf,+perfmon \
    --securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked,+keep_caps_locked "$@"
"""


@pytest.fixture
def bpf_caps_without_tracefs() -> Iterator[list[str]]:
    """A command prefix: CAP_BPF and CAP_PERFMON only, tracefs not readable (see _BPF_CAPS_ONLY)."""
    for tool in ("unshare", "setpriv"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} (util-linux) is missing")
    yield ["unshare", "--mount", "sh", "-ec", _BPF_CAPS_ONLY, "sh"]


def test_cli_without_tracefs_access_is_one_line(bpf_privileged: None,
                                                bpf_caps_without_tracefs: list[str]) -> None:
    """CAP_BPF+CAP_PERFMON load the program, but tracefs is not readable: one line naming what is needed."""
    proc = subprocess.run([*bpf_caps_without_tracefs, sys.executable, "-m", "pylibbpf", "trace", "exec",
                           "--duration", "1"], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          cwd=ROOT)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "cannot read tracefs" in lines[0] and "Permission denied" in lines[0]
    assert "root or CAP_BPF+CAP_PERFMON" in lines[0] and "CAP_DAC_READ_SEARCH" in lines[0]


def test_the_install_docs_name_the_distribution() -> None:
    """The import-name clash with the other `pylibbpf` project is explained where users install."""
    page = (ROOT / "docs" / "install.md").read_text()
    section = page.split("\n## Install", 1)[1].split("\n## ", 1)[0]
    for fragment in ("pylibbpf-cffi", "import pylibbpf", ".venv/bin/pylibbpf", "make wheel", "manylinux_2_34",
                     "--no-build-isolation"):
        assert fragment in section, fragment
    readme = (ROOT / "README.md").read_text().split("\n## Install", 1)[1].split("\n## ", 1)[0]
    assert "pylibbpf-cffi" in readme and "install only one" in readme


def test_the_install_docs_name_the_sdists_requirements() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    install = (ROOT / "docs" / "install.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    wanted = [*meta["build-system"]["requires"], *(d.split(",")[0] for d in meta["project"]["dependencies"])]
    assert [w for w in wanted if f"`{w}`" not in install] == []
    assert "`make wheel` and `make sdist` run the whole `make setup` first" in install
