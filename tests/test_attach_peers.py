"""The attach kinds beside the basic family, on the real kernel: cookies, multi-probes, legacy tc,
sockmaps, sk_lookup, netfilter, freplace and struct_ops.

tests/bpf/peers.bpf.c: the cookie programs write ``bpf_get_attach_cookie()``
into ``cookies`` at their slot (K_* below) for this process only; the network
programs count their runs in ``counts`` (N_*); the uprobe.multi program counts
per cookie in ``by_cookie``. Every namespace, interface, qdisc and library a
test makes has a name unique to this run and is removed afterwards. This
kernel has no kprobes: those attaches are tested for their error.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from progs import counter, wait_until
from test_program import file_offset

from pylibbpf import BPFError, BPFObject, Link, LoadError, features, ffi, lib

pytestmark = pytest.mark.usefixtures("bpf_privileged")

K_TP, K_RAW, K_BTF, K_UPROBE, K_PERF, K_KPROBE = range(6)
N_TC, N_MSG, N_SKB, N_LOOKUP, N_NF = range(5)
PID = os.getpid()
COOKIE = 0x1122334455667788

BPF_OBJECT = "peers"

# Three functions to probe, in a library this process loads (ctypes): the probes fire in this process.
LIB_C = r"""
__attribute__((noinline)) int plb_a(int x) { __asm__ volatile(""); return x + 1; }
__attribute__((noinline)) int plb_b(int x) { __asm__ volatile(""); return x + 2; }
__attribute__((noinline)) int plb_c(int x) { __asm__ volatile(""); return x + 3; }
"""


@pytest.fixture(scope="module")
def peer_lib(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ctypes.CDLL]:
    out = tmp_path_factory.mktemp("peers") / "libplbpeers.so"
    src = out.with_suffix(".c")
    src.write_text(LIB_C)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out, ctypes.CDLL(str(out))


@pytest.fixture
def obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with BPFObject.open(bpf_objects["peers"]) as o:
        o.load()
        o.maps["target"][0] = PID
        yield o


def cookie_of(o: BPFObject, slot: int) -> int:
    return counter(o, "cookies", slot)


# --- cookies ---------------------------------------------------------------------------------------

def test_tracepoint_raw_tracepoint_and_tp_btf_cookies(obj: BPFObject) -> None:
    with obj.programs["cookie_tp"].attach_tracepoint("syscalls", "sys_enter_getppid", cookie=COOKIE), \
            obj.programs["cookie_raw"].attach_raw_tracepoint("sys_enter", cookie=COOKIE + 1), \
            obj.programs["cookie_btf"].attach_trace(cookie=COOKIE + 2):
        os.getppid()
        assert (cookie_of(obj, K_TP), cookie_of(obj, K_RAW), cookie_of(obj, K_BTF)) == (COOKIE, COOKIE + 1,
                                                                                      COOKIE + 2)


def test_uprobe_cookie(obj: BPFObject, peer_lib: tuple[Path, ctypes.CDLL]) -> None:
    path, so = peer_lib
    with obj.programs["cookie_uprobe"].attach_uprobe(path, "plb_b", cookie=7):
        assert so.plb_b(1) == 3
        assert cookie_of(obj, K_UPROBE) == 7


def test_perf_event_cookie(obj: BPFObject) -> None:
    links = obj.programs["cookie_perf"].attach_perf_event("page-faults", period=1, cpus=[0], cookie=COOKIE)
    try:
        os.sched_setaffinity(0, {0})
        try:
            with mmap.mmap(-1, 1 << 20) as pages:  # fresh pages, written: a fault each on CPU 0
                for offset in range(0, len(pages), mmap.PAGESIZE):
                    pages[offset] = 1
        finally:
            os.sched_setaffinity(0, set(features.online_cpus()))
        assert cookie_of(obj, K_PERF) == COOKIE
    finally:
        for link in links:
            link.destroy()


def test_kprobe_cookie_and_kprobe_multi_say_the_kernel_has_none(obj: BPFObject) -> None:
    if not features.kprobes_missing():
        pytest.skip("this kernel has kprobes")
    with pytest.raises(BPFError, match="kprobe") as info:
        obj.programs["cookie_kprobe"].attach_kprobe("do_nanosleep", cookie=1)
    assert info.value.errno == errno.EOPNOTSUPP
    with pytest.raises(BPFError, match="kprobe") as info:
        obj.programs["multi_kprobe"].attach_kprobe_multi(symbols=["do_nanosleep"], cookies=[1])
    assert info.value.errno == errno.EOPNOTSUPP


# --- uprobe.multi ----------------------------------------------------------------------------------

def by_cookie(o: BPFObject) -> dict[int, int]:
    return dict(o.maps["by_cookie"].items())


def call_abc(so: ctypes.CDLL) -> None:
    """plb_a once, plb_b twice, plb_c three times."""
    for fn, times in ((so.plb_a, 1), (so.plb_b, 2), (so.plb_c, 3)):
        for _ in range(times):
            fn(0)


def test_uprobe_multi_by_symbols_with_cookies(obj: BPFObject, peer_lib: tuple[Path, ctypes.CDLL]) -> None:
    path, so = peer_lib
    link = obj.programs["multi_uprobe"].attach_uprobe_multi(path, symbols=["plb_a", "plb_b", "plb_c"],
                                                            cookies=[11, 22, 33])
    with link:
        call_abc(so)
        assert by_cookie(obj) == {11: 1, 22: 2, 33: 3}
    call_abc(so)  # detached: nothing more is counted
    assert by_cookie(obj) == {11: 1, 22: 2, 33: 3}


def test_uprobe_multi_by_pattern_and_by_offsets(obj: BPFObject, peer_lib: tuple[Path, ctypes.CDLL]) -> None:
    path, so = peer_lib
    prog = obj.programs["multi_uprobe"]
    with prog.attach_uprobe_multi(path, "plb_?"):
        call_abc(so)
        assert by_cookie(obj) == {0: 6}
    offsets = [file_offset(path, "plb_c"), file_offset(path, "plb_a")]
    with prog.attach_uprobe_multi(path, offsets=offsets, cookies=[5, 6], pid=PID):
        call_abc(so)
        assert by_cookie(obj) == {0: 6, 5: 3, 6: 1}


def test_uprobe_multi_names_what_was_not_found(obj: BPFObject, peer_lib: tuple[Path, ctypes.CDLL]) -> None:
    path, _ = peer_lib
    prog = obj.programs["multi_uprobe"]
    with pytest.raises(BPFError, match=f"no function 'plb_nope' in {path}") as info:
        prog.attach_uprobe_multi(path, "plb_nope")
    assert info.value.errno == errno.ENOENT
    with pytest.raises(BPFError, match=r"binary /nonexistent/lib\.so not found"):
        prog.attach_uprobe_multi("/nonexistent/lib.so", "plb_*")
    with pytest.raises(ValueError, match=r"exactly one of pattern, symbols= or offsets= \(got pattern, symbols\)"):
        prog.attach_uprobe_multi(path, "plb_*", symbols=["plb_a"])
    with pytest.raises(ValueError, match="cookies has 1 values for 2 symbols"):
        prog.attach_uprobe_multi(path, symbols=["plb_a", "plb_b"], cookies=[1])
    with pytest.raises(ValueError, match="cookies= needs symbols= or offsets="):
        prog.attach_uprobe_multi(path, "plb_*", cookies=[1])
    with pytest.raises(TypeError, match="symbols must be a sequence"):
        prog.attach_uprobe_multi(path, symbols="plb_a")


# --- network namespaces, legacy tc -----------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the block with this thread in network namespace ``name``."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(target, lib.CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        try:
            yield
        finally:
            if _libc.setns(own, lib.CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(own)
        os.close(target)


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace of this run with its loopback up."""
    name = f"plbP{PID}"
    ip("netns", "add", name)
    try:
        ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture
def veth(netns: str) -> Iterator[tuple[str, str, str]]:
    """(namespace, interface, peer namespace): ``netns``'s end (192.0.2.2) of a veth pair whose other
    end (192.0.2.1) is in a second namespace of this run."""
    peer_ns, a, b = f"plbQ{PID}", f"pa{PID}"[:15], f"pb{PID}"[:15]
    ip("netns", "add", peer_ns)
    try:
        ip("link", "add", a, "netns", peer_ns, "type", "veth", "peer", "name", b, "netns", netns)
        for ns, dev, addr in ((peer_ns, a, "192.0.2.1/24"), (netns, b, "192.0.2.2/24")):
            ip("-n", ns, "addr", "add", addr, "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
        yield netns, b, peer_ns
    finally:
        subprocess.run(["ip", "netns", "del", peer_ns], capture_output=True)


def tc(ns: str, *args: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, "tc", *args], check=True, capture_output=True,
                          text=True).stdout


def send_udp(ns: str, addr: str, count: int) -> None:
    """``count`` datagrams from namespace ``ns`` to ``addr``, to a socket bound there when it is local
    (no ICMP error comes back)."""
    with in_netns(ns), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        port = 9
        if addr.startswith("127."):
            sink.bind((addr, 0))
            port = sink.getsockname()[1]
        for i in range(count):
            s.sendto(b"plb%d" % i, (addr, port))


def test_tc_filter_counts_and_goes_with_its_qdisc(obj: BPFObject, veth: tuple[str, str, str]) -> None:
    ns, dev, _ = veth
    with in_netns(ns):
        link = obj.programs["tc_count"].attach_tc(dev, "egress", priority=7, handle=3)
    shown = tc(ns, "filter", "show", "dev", dev, "egress")
    assert "tc_count" in shown and "direct-action" in shown and "pref 7" in shown
    assert "clsact" in tc(ns, "qdisc", "show", "dev", dev)
    send_udp(ns, "192.0.2.1", 4)  # leaves through dev: its egress
    assert counter(obj, "counts", N_TC) >= 4
    with pytest.raises(BPFError, match="has no kernel link fd") as info:
        link.fd  # noqa: B018
    assert info.value.errno == errno.EOPNOTSUPP
    link.destroy()  # from outside the namespace: removed there all the same
    link.destroy()  # idempotent
    assert link.destroyed
    assert "tc_count" not in tc(ns, "filter", "show", "dev", dev, "egress")
    assert "clsact" not in tc(ns, "qdisc", "show", "dev", dev)  # added by the attach: removed with it


def test_tc_leaves_a_qdisc_that_was_there(obj: BPFObject, veth: tuple[str, str, str]) -> None:
    ns, dev, peer_ns = veth
    tc(ns, "qdisc", "add", "dev", dev, "clsact")
    with in_netns(ns):
        first = obj.programs["tc_count"].attach_tc(dev)
        second = obj.programs["tc_count"].attach_tc(socket.if_nametoindex(dev), "ingress", priority=9)
    assert tc(ns, "filter", "show", "dev", dev, "ingress").count("direct-action") == 2
    send_udp(peer_ns, "192.0.2.2", 3)  # arrives through dev (the first filter's TC_ACT_OK ends the chain)
    assert counter(obj, "counts", N_TC) >= 3
    first.destroy()
    assert tc(ns, "filter", "show", "dev", dev, "ingress").count("direct-action") == 1
    second.destroy()
    assert "tc_count" not in tc(ns, "filter", "show", "dev", dev, "ingress")
    assert "clsact" in tc(ns, "qdisc", "show", "dev", dev)


def test_tc_filter_goes_when_its_object_closes(bpf_objects: dict[str, Path], veth: tuple[str, str, str]) -> None:
    ns, dev, _ = veth
    with BPFObject.open(bpf_objects["peers"]) as o:
        o.load()
        with in_netns(ns):
            o.programs["tc_count"].attach_tc(dev)  # the Link is dropped: the object keeps it
        assert "tc_count" in tc(ns, "filter", "show", "dev", dev, "ingress")
    assert "tc_count" not in tc(ns, "filter", "show", "dev", dev, "ingress")
    assert "clsact" not in tc(ns, "qdisc", "show", "dev", dev)


def test_tc_bad_interface_and_direction(obj: BPFObject) -> None:
    prog = obj.programs["tc_count"]
    with pytest.raises(BPFError, match="no network interface named 'plbnope0'") as info:
        prog.attach_tc("plbnope0")
    assert info.value.errno == errno.ENODEV
    with pytest.raises(ValueError, match="direction must be one of"):
        prog.attach_tc("lo", "both")
    with pytest.raises(ValueError, match="priority"):
        prog.attach_tc("lo", priority=70000)


# --- sockmap, sk_lookup, netfilter -----------------------------------------------------------------

@contextlib.contextmanager
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected TCP pair on the loopback: (client, server side)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    with client, server:
        yield client, server


def test_sockmap_runs_sk_msg_and_sk_skb_for_sockets_written_as_fds(obj: BPFObject) -> None:
    socks = obj.maps["socks"]
    msg = obj.programs["msg_count"].attach_sockmap(socks)
    skb = obj.programs["skb_count"].attach_sockmap(socks)
    with tcp_pair() as (client, server):
        socks[0] = client.fileno()  # the kernel takes the socket behind the fd
        socks[1] = server.fileno()
        for _ in range(3):
            client.sendall(b"hello")
        assert wait_until(lambda: counter(obj, "counts", N_MSG) == 3 and counter(obj, "counts", N_SKB) >= 1)
        assert server.recv(100).startswith(b"hello")
        msg.destroy()
        skb.destroy()
    with tcp_pair() as (client, _server):
        socks[2] = client.fileno()  # a socket added after the detach runs no program
        client.sendall(b"again")
    assert counter(obj, "counts", N_MSG) == 3


def test_sockmap_refuses_other_maps_and_programs(obj: BPFObject) -> None:
    with pytest.raises(BPFError, match="map 'counts' is not a sockmap or sockhash") as info:
        obj.programs["msg_count"].attach_sockmap(obj.maps["counts"])
    assert info.value.errno == errno.EINVAL
    with pytest.raises(BPFError, match="says no sockmap attach type"):
        obj.programs["tc_count"].attach_sockmap(obj.maps["socks"])
    with pytest.raises(TypeError, match="map must be a Map"):
        obj.programs["msg_count"].attach_sockmap("socks")  # type: ignore[arg-type]


def test_sk_lookup_runs_in_its_namespace_only(obj: BPFObject, netns: str) -> None:
    with obj.programs["lookup_count"].attach_netns(f"/run/netns/{netns}"):
        with tcp_pair():  # this namespace's connections are not looked up by it
            pass
        assert counter(obj, "counts", N_LOOKUP) == 0
        with in_netns(netns), tcp_pair():
            pass
        assert counter(obj, "counts", N_LOOKUP) >= 1
    with pytest.raises(BPFError, match="cannot open network namespace /run/netns/plbnope") as info:
        obj.programs["lookup_count"].attach_netns("/run/netns/plbnope")
    assert info.value.errno == errno.ENOENT


def test_netfilter_hook_sees_the_namespace_packets(obj: BPFObject, netns: str) -> None:
    with in_netns(netns):
        link = obj.programs["nf_count"].attach_netfilter("ipv4", "local_out", -100)
    with link:
        send_udp(netns, "127.0.0.1", 5)
        assert counter(obj, "counts", N_NF) == 5  # the datagrams; this namespace has no other traffic
    send_udp(netns, "127.0.0.1", 2)
    assert counter(obj, "counts", N_NF) == 5
    with pytest.raises(ValueError, match="hooknum must be one of"):
        obj.programs["nf_count"].attach_netfilter("ipv4", "output", 0)


# --- freplace, struct_ops --------------------------------------------------------------------------

XDP_DROP, XDP_PASS = 1, 2


def loaded_ext(ext: BPFObject) -> bool:
    """Load the freplace object: True, or False where the kernel refuses extension programs (as it
    refuses fentry: this machine's kernel does), after checking that the error says which and why."""
    try:
        ext.load()
        return True
    except LoadError as e:
        assert e.errno == errno.EPERM and "new_decide" in str(e)
        return False


def test_freplace_takes_a_global_functions_place(obj: BPFObject, bpf_objects: dict[str, Path]) -> None:
    target = obj.programs["xdp_target"]
    packet = bytes(64)
    assert target.test_run(packet).retval == XDP_PASS
    with BPFObject.open(bpf_objects["freplace"]) as ext:
        prog = ext.programs["new_decide"]
        prog.set_attach_target(target, "decide")
        with pytest.raises(ValueError, match="needs target and func_name together"):
            prog.attach_freplace(target)
        if not loaded_ext(ext):
            with pytest.raises(BPFError, match="program 'new_decide' is not loaded"):
                prog.attach_freplace(target, "decide")
            return
        with prog.attach_freplace(target, "decide"):
            assert target.test_run(packet).retval == XDP_DROP
        assert target.test_run(packet).retval == XDP_PASS
        with pytest.raises(BPFError, match="already loaded") as info:
            prog.set_attach_target(target, "decide")
        assert info.value.errno == errno.EBUSY


def test_freplace_with_the_load_time_target(obj: BPFObject, bpf_objects: dict[str, Path]) -> None:
    target = obj.programs["xdp_target"]
    with BPFObject.open(bpf_objects["freplace"]) as ext:
        ext.programs["new_decide"].set_attach_target(target.fd, "decide")
        if loaded_ext(ext):
            with ext.programs["new_decide"].attach_freplace():
                assert target.test_run(bytes(64)).retval == XDP_DROP
        with pytest.raises(TypeError, match="target must be a Program or a program fd"):
            ext.programs["new_decide"].set_attach_target("xdp_target", "decide")  # type: ignore[arg-type]


def available_cc() -> list[str]:
    return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()


def _rename_cc(o: BPFObject, name: bytes) -> None:
    """Rename the congestion control (tcp_congestion_ops.name) so that concurrent runs do not collide."""
    offset = o.btf_struct("tcp_congestion_ops").offset("name")
    size = ffi.new("size_t *")
    data = lib.bpf_map__initial_value(o.struct_ops["plb_cc"].map.c_ptr, size)
    ffi.memmove(data + offset, name.ljust(16, b"\0"), 16)


def test_attach_all_registers_struct_ops_as_a_skeleton_does(bpf_objects: dict[str, Path]) -> None:
    name = f"plc{PID}".encode()
    with BPFObject.open(bpf_objects["tcp_cc"]) as o:
        _rename_cc(o, name)
        o.load()
        assert len(o.attach_all()) == 1  # the struct_ops link; the caller keeps none of it
        assert name.decode() in available_cc()
        assert len(o.links) == 1
    assert name.decode() not in available_cc()  # the object's close() unregistered it


def test_struct_ops_registers_a_tcp_congestion_control(bpf_objects: dict[str, Path]) -> None:
    name = f"plb{PID}".encode()
    with BPFObject.open(bpf_objects["tcp_cc"]) as o:
        ops = o.struct_ops["plb_cc"]
        _rename_cc(o, name)
        with pytest.raises(BPFError, match=r"call BPFObject\.load\(\) first"):
            ops.attach()
        o.load()
        link = ops.attach()
        assert isinstance(link, Link)
        assert name.decode() in available_cc()
        link.destroy()
        assert name.decode() not in available_cc()
        with pytest.raises(KeyError, match="no struct_ops map named 'nope'"):
            o.struct_ops["nope"]
