"""The raw binding: libbpf's whole public API through pylibbpf.lib, the version, the error path."""

from __future__ import annotations

import errno
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import pylibbpf
from pylibbpf import BPFError, ffi, lib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import list_libbpf_api  # noqa: E402

# Functions of the pinned headers that pylibbpf deliberately leaves out of the cdef:
# they take or return a va_list printer, which cannot cross CFFI (logging goes
# through the shim's own printer instead: see pylibbpf/_ffi.py).
NOT_BOUND = {"libbpf_set_print", "btf_dump__new"}


def test_libbpf_version_is_the_pin() -> None:
    assert pylibbpf.libbpf_version() == "1.5.0"
    assert (lib.libbpf_major_version(), lib.libbpf_minor_version()) == (1, 5)


def test_every_public_libbpf_function_is_callable() -> None:
    include = ROOT / "vendor" / "libbpf" / "build" / "install" / "include"
    names = {list_libbpf_api.function_name(d)
             for decls in list_libbpf_api.declarations(include).values() for d in decls}
    assert len(names) > 300  # libbpf.h + bpf.h + btf.h
    missing = sorted(n for n in names - NOT_BOUND if not hasattr(lib, n))
    assert missing == []


def test_constants_and_layouts_come_from_the_headers() -> None:
    assert lib.BPF_MAP_TYPE_RINGBUF == 27
    assert lib.BPF_F_CURRENT_CPU == 0xFFFFFFFF
    assert ffi.offsetof("struct bpf_test_run_opts", "sz") == 0
    assert ffi.sizeof("struct btf_type") == 12


def test_extension_links_libbpf_statically() -> None:
    so = Path(pylibbpf._ffi.__file__).parent.glob("_pylibbpf_cffi*.so")
    out = subprocess.run(["ldd", str(next(so))], capture_output=True, text=True, check=True).stdout
    assert "libbpf" not in out
    assert "libelf" in out


def test_libbpf_messages_reach_logging(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="pylibbpf.libbpf"), pytest.raises(BPFError):
        pylibbpf.BPFObject.open("/nonexistent/x.bpf.o")
    assert any("x.bpf.o" in r.getMessage() for r in caplog.records)


def test_bpf_error_carries_errno_and_libbpf_message() -> None:
    with pytest.raises(BPFError) as info:
        pylibbpf.BPFObject.open(b"\x7fELF not really")
    assert info.value.errno == lib.LIBBPF_ERRNO__FORMAT
    assert "format" in str(info.value).lower()
    assert isinstance(info.value, OSError)


def test_libbpf_private_codes_have_messages() -> None:
    from pylibbpf._libbpf import strerror

    assert "verifier" in strerror(lib.LIBBPF_ERRNO__VERIFY).lower()
    assert strerror(errno.EPERM) == "Operation not permitted"
