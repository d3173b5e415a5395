"""What each kind of BPF map is to the Map class: per-CPU, array, keyless, of fds, without elements.

Facts of the kernel's map types (kernel/bpf/*.c) that decide how :class:`~pylibbpf.Map`
reads and writes a map, kept apart so that the tables read as one list; and ``K``, ``V``,
the type parameters of ``Map[K, V]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._ffi import lib

if TYPE_CHECKING:  # defaults (PEP 696): a bare ``Map`` is ``Map[Any, Any]``; only type checkers read them
    from typing_extensions import TypeVar

    K = TypeVar("K", default=Any)
    V = TypeVar("V", default=Any)
else:
    from typing import TypeVar

    K, V = TypeVar("K"), TypeVar("V")

PER_CPU_TYPES = frozenset({lib.BPF_MAP_TYPE_PERCPU_HASH, lib.BPF_MAP_TYPE_PERCPU_ARRAY,
                            lib.BPF_MAP_TYPE_LRU_PERCPU_HASH, lib.BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE})
ARRAY_TYPES = frozenset({lib.BPF_MAP_TYPE_ARRAY, lib.BPF_MAP_TYPE_PERCPU_ARRAY})
# Map types without keys: a queue/stack pushes and pops values, a bloom filter adds and tests them.
KEYLESS = {
    lib.BPF_MAP_TYPE_QUEUE: "push(), pop() and peek()",
    lib.BPF_MAP_TYPE_STACK: "push(), pop() and peek()",
    lib.BPF_MAP_TYPE_BLOOM_FILTER: "add() and `value in m`",
}
# Map types whose values are fds when written (a Map, a Program, a socket or a cgroup directory's
# fd) and what the kernel returns when they are read back from user space (kernel/bpf/arraymap.c,
# kernel/bpf/map_in_map.c, net/core/sock_map.c): what each value is.
FD_VALUES = {
    lib.BPF_MAP_TYPE_PROG_ARRAY: "a program (read back: its id)",
    lib.BPF_MAP_TYPE_ARRAY_OF_MAPS: "a map (read back: its id)",
    lib.BPF_MAP_TYPE_HASH_OF_MAPS: "a map (read back: its id)",
    lib.BPF_MAP_TYPE_SOCKMAP: "a socket (read back: its cookie)",
    lib.BPF_MAP_TYPE_SOCKHASH: "a socket (read back: its cookie)",
    lib.BPF_MAP_TYPE_CGROUP_ARRAY: "a cgroup directory's fd",
}
# Maps of maps: a value is an inner map, written as its fd and read back as its id.
MAP_OF_MAPS = frozenset({lib.BPF_MAP_TYPE_ARRAY_OF_MAPS, lib.BPF_MAP_TYPE_HASH_OF_MAPS})
# Map types whose values are ints when they have no BTF type: an ifindex (devmap), a queue size
# (cpumap), or the struct bpf_devmap_val/bpf_cpumap_val of the program's BTF.
INT_VALUES = frozenset({lib.BPF_MAP_TYPE_DEVMAP, lib.BPF_MAP_TYPE_DEVMAP_HASH, lib.BPF_MAP_TYPE_CPUMAP})
# Map types whose elements cannot be looked up: what to read them with instead.
NO_ELEMENTS = {
    lib.BPF_MAP_TYPE_RINGBUF: "RingBuffer, RingBufConsumer or map_ringbuf",
    lib.BPF_MAP_TYPE_USER_RINGBUF: "UserRingBuffer",
    lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY: "PerfBuffer, PerfReader or OrderedReader",
}
