"""bcc's Python API as a baseline: ``open_ring_buffer`` + ``ring_buffer_poll``/``ring_buffer_consume``.

bcc (Debian's ``python3-bpfcc``, 0.26) compiles its C text at run time and so
needs kernel headers; :func:`prepare` installs bcc when missing and, when the
running kernel has no headers, unpacks Debian's ``linux-headers`` packages
into benchmarks/build/ and names the merged tree with ``BCC_KERNEL_SOURCE``.
bcc is pure Python over libbcc (ctypes): it is imported into the same
interpreter as the other consumers by appending Debian's dist-packages to
``sys.path``, for the bcc run only.

bcc 0.26 cannot use bpf_loop: its producer is a bounded loop of at most
MAX_CHUNK events per trigger (more fails the verifier), run as a raw_tp program
through the same BPF_PROG_TEST_RUN trigger.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from .consumers_py import consumer
from .harness import Reader, SeqCheck, now_ns
from .producers import BUILD, Trigger

DIST_PACKAGES = "/usr/lib/python3/dist-packages"
HEADERS = BUILD / "kernel-headers"
MAX_CHUNK = 256
RING_PAGES = 32768   # 128 MiB, like the libbpf producer's ring

BCC_TEXT = r"""
struct event { u64 seq; u64 ts; u8 payload[EVENT_SIZE - 16]; };
BPF_RINGBUF_OUTPUT(rb, RING_PAGES);
BPF_ARRAY(failures, u64, 1);

/* ctx args: count, first_seq, size (fixed at compile time here), flags */
int produce(struct bpf_raw_tracepoint_args *ctx)
{
    u64 count = ctx->args[0], first = ctx->args[1], flags = ctx->args[3];
    int i;

#pragma clang loop unroll(disable)
    for (i = 0; i < MAX_CHUNK; i++) {
        if (i >= count)
            break;
        struct event *e = rb.ringbuf_reserve(sizeof(struct event));
        if (!e) {
            int zero = 0;
            u64 *failed = failures.lookup(&zero);
            if (failed)
                __sync_fetch_and_add(failed, 1);
            break;
        }
        e->seq = first + i;
        e->ts = bpf_ktime_get_ns();
        rb.ringbuf_submit(e, (flags & 1) ? (i + 1 == count ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP) : 0);
    }
    return i;
}
"""


def _run(*cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True)


def _bcc_installed() -> bool:
    return Path(DIST_PACKAGES, "bcc", "__init__.py").exists()


def _install_bcc() -> str | None:
    if _bcc_installed():
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "bcc (python3-bpfcc) is not installed and apt-get cannot run here"
    if _run("apt-get", "install", "-y", "-qq", "python3-bpfcc").returncode:
        _run("apt-get", "update", "-qq")
        done = _run("apt-get", "install", "-y", "-qq", "python3-bpfcc")
        if done.returncode:
            return f"apt-get install python3-bpfcc failed: {done.stderr.strip()[-300:]}"
    return None if _bcc_installed() else "python3-bpfcc installed no bcc module"


def _header_packages() -> list[str] | None:
    """The newest linux-headers ABI that apt offers as both -common and -ARCH: two package names."""
    arch = _run("dpkg", "--print-architecture").stdout.strip() or "amd64"
    for attempt in range(2):
        found = _run("apt-cache", "search", "--names-only", r"^linux-headers-[0-9.]+-[0-9]+-common$").stdout
        names = re.findall(r"^linux-headers-([0-9.]+-[0-9]+)-common ", found, re.M)
        if names:
            abi = max(names, key=lambda v: [int(x) for x in re.split(r"[.-]", v)])
            return [f"linux-headers-{abi}-common", f"linux-headers-{abi}-{arch}"]
        if attempt == 0:
            _run("apt-get", "update", "-qq")
    return None


def _kernel_headers() -> tuple[str | None, str | None]:
    """(BCC_KERNEL_SOURCE or None when the system has headers, skip reason or None)."""
    if Path(f"/lib/modules/{platform.release()}/build/include/linux").is_dir():
        return None, None
    merged = HEADERS / "merged"
    if (merged / ".complete").exists():
        return str(merged), None
    packages = _header_packages()
    if not packages:
        return None, "no linux-headers packages found through apt for bcc"
    debs, root = HEADERS / "debs", HEADERS / "root"
    shutil.rmtree(HEADERS, ignore_errors=True)
    debs.mkdir(parents=True)
    got = _run("apt-get", "download", *packages, cwd=debs)
    if got.returncode:
        return None, f"apt-get download {' '.join(packages)} failed: {got.stderr.strip()[-300:]}"
    for deb in sorted(debs.glob("*.deb")):
        if _run("dpkg", "-x", str(deb), str(root)).returncode:
            return None, f"dpkg -x {deb.name} failed"
    # The -ARCH tree holds the generated headers and config; -common holds the rest. Their
    # scripts/ and tools/ links point into linux-kbuild, which bcc does not need: dropped.
    def dangling(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if os.path.islink(os.path.join(folder, n))
                and not os.path.exists(os.path.join(folder, n))]

    for name in packages:
        shutil.copytree(root / "usr" / "src" / name, merged, symlinks=True, dirs_exist_ok=True, ignore=dangling)
    (merged / ".complete").write_text(" ".join(packages) + "\n")
    return str(merged), None


def prepare() -> tuple[dict[str, str], str | None]:
    """Install bcc and kernel headers as needed: (environment for the bcc runs, skip reason or None)."""
    reason = _install_bcc()
    if reason:
        return {}, reason
    source, reason = _kernel_headers()
    if reason:
        return {}, reason
    return ({"BCC_KERNEL_SOURCE": source} if source else {}), None


def _load(size: int) -> tuple[Any, Any]:
    """Compile and load the bcc producer for ``size``-byte events: (BPF, its raw_tp function)."""
    if DIST_PACKAGES not in sys.path:
        sys.path.append(DIST_PACKAGES)
    from bcc import BPF

    cflags = [f"-DEVENT_SIZE={size}", f"-DRING_PAGES={RING_PAGES}", f"-DMAX_CHUNK={MAX_CHUNK}"]
    b = BPF(text=BCC_TEXT, cflags=cflags)
    return b, b.load_func("produce", BPF.RAW_TRACEPOINT)


def _reader(b: Any, fn: Any, size: int) -> Reader:
    def failures() -> int:
        return int(b["failures"][ctypes.c_int(0)].value)

    return Reader(lambda t: b.ring_buffer_poll(t) if t else b.ring_buffer_consume(),
                  Trigger(fn.fd, size, per_cpu=False, max_chunk=MAX_CHUNK), failures, b.cleanup)


@consumer("bcc-ringbuf", "ringbuf")
def bcc_ringbuf(size: int, check: SeqCheck) -> Reader:
    """bcc: ctypes callback per event reading the seq with c_uint64.from_address (bcc's fast idiom)."""
    b, fn = _load(size)
    u64_at, jump, lat, clock = ctypes.c_uint64.from_address, check.jump, check.lat_ns, now_ns
    expect = n = 0

    def cb(ctx: object, data: int, size: int) -> int:
        nonlocal expect, n
        seq = u64_at(data).value
        expect = seq + 1 if seq == expect else jump(expect, seq)
        n += 1
        return 0

    def cb_latency(ctx: object, data: int, size: int) -> int:
        nonlocal expect, n
        t = clock()
        seq = u64_at(data).value
        lat.append(t - u64_at(data + 8).value)
        expect = seq + 1 if seq == expect else jump(expect, seq)
        n += 1
        return 0

    check.count(lambda: n)
    b["rb"].open_ring_buffer(cb_latency if check.latency else cb)
    return _reader(b, fn, size)


@consumer("bcc-ringbuf-noop", "ringbuf", modes=("drain", "steady"))
def bcc_ringbuf_noop(size: int, check: SeqCheck) -> Reader:
    """bcc with a ctypes callback that does nothing: the cost of one call per event.

    bcc's ``ring_buffer_consume()``/``ring_buffer_poll()`` return nothing, so
    this row calls the libbcc functions they wrap (``bpf_consume_ringbuf``,
    ``bpf_poll_ringbuf``), which return the number of events handled.
    """
    b, fn = _load(size)
    from bcc.libbcc import lib as libbcc  # importable once _load put bcc on sys.path

    b["rb"].open_ring_buffer(lambda ctx, data, size: 0)
    manager = b._ringbuf_manager

    def failures() -> int:
        return int(b["failures"][ctypes.c_int(0)].value)

    def step(timeout_ms: int) -> int:
        got = libbcc.bpf_poll_ringbuf(manager, timeout_ms) if timeout_ms else libbcc.bpf_consume_ringbuf(manager)
        return check.add(max(0, got))

    return Reader(step, Trigger(fn.fd, size, per_cpu=False, max_chunk=MAX_CHUNK), failures, b.cleanup)


@consumer("bcc-ringbuf-event", "ringbuf", modes=("drain", "steady"))
def bcc_ringbuf_event(size: int, check: SeqCheck) -> Reader:
    """bcc as its tools and tutorials write it: ``event = b["rb"].event(data)`` per event (for context)."""
    b, fn = _load(size)
    table, jump = b["rb"], check.jump
    expect = n = 0

    def cb(ctx: object, data: int, size: int) -> int:
        nonlocal expect, n
        seq = table.event(data).seq
        expect = seq + 1 if seq == expect else jump(expect, seq)
        n += 1
        return 0

    check.count(lambda: n)
    table.open_ring_buffer(cb)
    return _reader(b, fn, size)
