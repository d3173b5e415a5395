"""Links: what an attach call returns, and what keeps an attachment until it is destroyed.

A :class:`Link` wraps libbpf's ``struct bpf_link`` or a kernel link fd. The
rules it keeps:

1. ``destroy()`` (also ``close()``, the context manager's exit) detaches, once.
2. A link made by an object's program also holds the object's libbpf memory
   (:meth:`Link.hold`), released after the detach: a USDT link detaches
   through its object's bookkeeping, so that memory outlives the link.
3. In a forked child, destroying an inherited link frees the child's copy
   only (libbpf's ``bpf_link__disconnect``): the parent's perf events and
   USDT specs stay attached.
4. Pins are checked before use: a pin is reopened only as a link, pinned
   once, and unpinned only from bpffs and only where it is still this link.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any, Protocol

from . import _check, _close, _kernel, _libbpf, loaded
from ._ffi import ffi
from .errors import BPFError, ClosedError

CData = Any


class LoadedProgram(Protocol):
    """What :meth:`Link.update_program` needs of a program: its name, fd and C handle."""

    name: str

    @property
    def fd(self) -> int: ...

    @property
    def c_ptr(self) -> CData: ...


class Holder(Protocol):
    """Memory a link may use until it is destroyed (its object's): released once the link is."""

    def release(self) -> None: ...


def _destroy_link(ptr: CData, fd: int | None, pid: int, holds: list[Holder],
                  detach: Callable[[], None] | None = None) -> None:
    """Detach and free a link, then release what it held (the finalizer's and destroy()'s work).

    In a process forked after the link was made, nothing is detached: the
    attachment is the parent's too (a perf event the detach would disable, a
    USDT spec in a map the parent uses), so the link is disconnected (freed
    without its detach) and only the child's copy of its fd is closed. A
    link without a kernel link (``detach``: legacy tc, ``bpf_prog_attach``)
    is detached in the process that made it only.
    """
    try:
        if detach is not None:
            if _close.current_pid() == pid:
                detach()
        elif ptr is not None:
            if _close.current_pid() != pid:  # cached: no getpid() call
                child_fd = _libbpf.bpf_link__fd(ptr)
                _libbpf.bpf_link__disconnect(ptr)
                _libbpf.bpf_link__destroy(ptr)
                if child_fd >= 0:
                    os.close(child_fd)
            else:
                _libbpf.bpf_link__destroy(ptr)
        elif fd is not None:
            os.close(fd)
    finally:
        for held in holds:
            held.release()
        holds.clear()


class Link:
    """An attachment; ``destroy()`` (also ``close()``) detaches. Idempotent; a context manager.

    Most links are libbpf's ``struct bpf_link`` (:attr:`c_ptr`); links made
    with a kernel link fd directly (``attach_xdp(mode=...)``, ``attach_tcx``
    in the direction the SEC() did not name) have ``c_ptr`` NULL and the same
    methods. Attachments the kernel keeps without a link (legacy tc
    filters, programs attached to a sockmap with ``bpf_prog_attach``) are
    Links without an fd: ``destroy()`` detaches them the same way, and
    ``fd``, ``pin()`` and ``update_program()`` raise BPFError (EOPNOTSUPP).
    A link made by an object's program is kept by the object until
    ``obj.close()`` (dropping it does not detach); one that outlives its
    object works until destroyed. A link nothing keeps (reopened with
    :meth:`open_pinned`) is destroyed by its finalizer when dropped.
    In a forked child, ``destroy()`` frees the child's copy only: what the
    parent attached stays attached.
    """

    def __init__(self) -> None:
        """Not called directly: a link comes from an ``attach*`` call or :meth:`open_pinned`."""
        raise TypeError("Link objects come from Program.attach*() or Link.open_pinned(path)")

    def _setup(self, ptr: CData, name: str, fd: int | None, iterator: bool,
               detach: Callable[[], None] | None = None) -> None:
        if sum(x is not None for x in (ptr, fd, detach)) != 1:
            raise TypeError("a Link wraps a struct bpf_link *, a link fd or a detach call")
        self._ptr = ptr
        self._fd = fd
        self._detach = detach
        self._pin_path: str | None = None
        self._iterator = iterator
        self._holds: list[Holder] = []
        self.name = name
        # The safety net: destroys a forgotten link (and so detaches it); destroy() disarms it.
        self._finalizer = _close.finalizer(self, _destroy_link, ptr, fd, _close.current_pid(), self._holds,
                                           detach)

    def hold(self, memory: Holder) -> None:
        """Keep ``memory`` (its object's) until this link is destroyed, then ``memory.release()``."""
        self._live()
        self._holds.append(memory)

    @classmethod
    def open_pinned(cls, path: str | os.PathLike[str]) -> Link:
        """Reopen a link pinned in bpffs (``bpf_link__open``); destroying it leaves the pin in place.

        BPFError (ENOENT) for a missing path, (EINVAL) naming what the pin
        holds when it is not a link (a pinned map or program).
        """
        p = _check.path(path, "path")
        what = f"bpf_link__open({p})"
        os.close(_libbpf.bpf_obj_get_kind(p, "link", what))
        link = new_link(_libbpf.bpf_link__open(p, what), os.path.basename(p))
        if _libbpf.bpf_fd_kind(link.fd) != "link":  # replaced between the two opens
            link.destroy()  # closes the fd only: the detach of a reopened link is a close
            raise BPFError(errno.EINVAL, f"{p} does not hold a pinned link", what)
        link._pin_path = p
        return link

    @classmethod
    def from_id(cls, link_id: int) -> Link:
        """Open the link with kernel id ``link_id`` (``bpf_link_get_fd_by_id``): a Link owning a new fd.

        Named after its program. Destroying it closes the fd only: the
        attachment stays while anything else holds the link (the process that
        made it, a pin). BPFError (ENOENT) when no link has that id, (EPERM)
        without CAP_SYS_ADMIN.
        """
        link_id = _check.integer(link_id, "link_id", lo=1, hi=_check.UINT32_MAX)
        what = f"bpf_link_get_fd_by_id({link_id})"
        fd = _kernel.get_fd_by_id("link", link_id, what)
        link = new_link(None, f"link {link_id}", fd=fd)  # owns fd from here
        try:
            prog_id = link.info().prog_id
        except BaseException:
            link.destroy()
            raise
        try:
            prog_fd = _kernel.get_fd_by_id("prog", prog_id, f"bpf_prog_get_fd_by_id({prog_id})")
        except BPFError:
            return link  # its program is not reachable (gone, or no permission): keep the id's name
        try:
            link.name = loaded.program_info(prog_fd, what).name
        finally:
            os.close(prog_fd)
        return link

    def info(self) -> loaded.LinkInfo:
        """What the kernel says of this link (``bpf_link_get_info_by_fd``): its kind's record.

        A :class:`~pylibbpf.loaded.LinkInfo` subclass per kind:
        :class:`~pylibbpf.loaded.TcxLinkInfo` (ifindex, direction),
        :class:`~pylibbpf.loaded.PerfEventLinkInfo` (tracepoint, probe or
        event and its name), :class:`~pylibbpf.loaded.CgroupLinkInfo`,
        :class:`~pylibbpf.loaded.IterLinkInfo`... ClosedError once destroyed.
        """
        self._live()
        return loaded.link_info(self.fd, f"bpf_link_get_info_by_fd({self.name})")

    def _live(self) -> None:
        if self.destroyed:
            raise ClosedError(f"link of {self.name!r}")

    def _no_fd(self, what: str) -> None:
        if self._detach is not None:
            raise BPFError(errno.EOPNOTSUPP, f"link of {self.name!r} has no kernel link fd (the "
                           "kernel keeps this attachment without one)", what)

    @property
    def c_ptr(self) -> CData:
        """The ``struct bpf_link *`` for ``pylibbpf.lib`` (valid until destroyed); NULL for fd links."""
        self._live()
        return ffi.NULL if self._ptr is None else self._ptr

    @property
    def fd(self) -> int:
        """The kernel link's fd; BPFError (EOPNOTSUPP) for an attachment without one."""
        self._live()
        self._no_fd(f"fd({self.name})")
        if self._ptr is not None:
            return _libbpf.bpf_link__fd(self._ptr)
        assert self._fd is not None
        return self._fd

    @property
    def pin_path(self) -> str | None:
        """Where the link is pinned, if it is."""
        self._live()
        return self._pin_path

    def pin(self, path: str | os.PathLike[str]) -> None:
        """Pin the link in bpffs: the attachment then outlives this Link and this process.

        BPFError (EEXIST) when something is pinned there, (EINVAL) outside
        bpffs, (EBUSY) when this link is pinned already (unpin it first: a
        link has one pin, as libbpf's). The attachment then lasts until the
        pin is removed and every fd of it is closed, whether or not this Link
        is destroyed.
        """
        p = _check.path(path, "path")
        self._live()
        self._no_fd(f"pin({self.name}, {p})")
        if self._pin_path is not None:
            raise BPFError(errno.EBUSY, f"link of {self.name!r} is already pinned at {self._pin_path}: "
                           "unpin() it first", f"pin({self.name}, {p})")
        if self._ptr is not None:
            _libbpf.bpf_link__pin(self._ptr, p, f"bpf_link__pin({self.name}, {p})")
        else:
            _libbpf.bpf_obj_pin(self.fd, p, f"bpf_obj_pin({self.name}, {p})")
        self._pin_path = p

    def unpin(self) -> None:
        """Remove the link's pin (the attachment stays while this Link lives).

        BPFError (EINVAL) when not pinned, or when the pin now holds something
        else (it is left in place); ValueError when the pin path is not on bpffs.
        """
        self._live()
        what = f"bpf_link__unpin({self.name})"
        if self._pin_path is None:
            raise BPFError(errno.EINVAL, f"link of {self.name!r} is not pinned", what)
        p = _check.bpffs_path(self._pin_path, "pin path")
        _libbpf.check_pinned_is(p, "link", self.fd, what)
        if self._ptr is not None and _libbpf.bpf_link__pin_path(self._ptr) is not None:
            _libbpf.bpf_link__unpin(self._ptr, what)
        else:
            _libbpf.unlink_pin(p, what)
        self._pin_path = None

    def update_program(self, prog: LoadedProgram) -> None:
        """Run ``prog`` (a :class:`~pylibbpf.Program`) in this link's place, atomically (``BPF_LINK_UPDATE``).

        BPFError (EINVAL) when the program is not loaded or its type or attach
        type does not fit the link, (EOPNOTSUPP) for link types the kernel
        cannot update (not every one can).
        """
        if not all(hasattr(prog, attr) for attr in ("name", "fd", "c_ptr")):
            raise TypeError(f"update_program needs a Program, not {type(prog).__name__}")
        self._live()
        what = f"bpf_link__update_program({self.name} -> {prog.name})"
        self._no_fd(what)
        fd = prog.fd
        if fd < 0:
            raise BPFError(errno.EINVAL, f"program {prog.name!r} is not loaded", what)
        ptr = prog.c_ptr
        if self._ptr is not None and ptr != ffi.NULL:
            _libbpf.bpf_link__update_program(self._ptr, ptr, what)
        else:
            _libbpf.bpf_link_update(self.fd, fd, what)

    def read(self, chunk: int = 65536) -> bytes:
        """Run an iterator link once and return everything it wrote (``bpf_iter_create`` + read to EOF).

        ``chunk``: bytes asked of each read (1 to 2**30). Blocks while the
        kernel walks the objects. TypeError for a link that is not an
        iterator's; TypeError/ValueError naming ``chunk`` for a bad one.
        """
        chunk = _check.integer(chunk, "chunk", lo=1, hi=1 << 30)
        self._live()
        if not self._iterator:
            raise TypeError(f"link of {self.name!r} is not an iterator (attach it with attach_iter())")
        fd = _libbpf.bpf_iter_create(self.fd, f"bpf_iter_create({self.name})")
        parts: list[bytes] = []
        try:
            while True:
                part = os.read(fd, chunk)
                if not part:
                    break
                parts.append(part)
        finally:
            os.close(fd)
        return b"".join(parts)

    def destroy(self) -> None:
        """Detach (a pinned attachment stays until its pin is removed). Idempotent.

        In a forked child it frees the child's copy only (the parent's
        attachment stays).
        """
        if not self.destroyed:
            self._ptr = self._fd = self._detach = None
            self._finalizer()

    close = destroy

    @property
    def destroyed(self) -> bool:
        return self._ptr is None and self._fd is None and self._detach is None

    def __enter__(self) -> Link:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __repr__(self) -> str:
        return f"<Link {self.name!r}{' destroyed' if self.destroyed else ''}>"


def new_link(ptr: CData, name: str, *, fd: int | None = None, iterator: bool = False,
             detach: Callable[[], None] | None = None) -> Link:
    """The Link for what an attach call made: a ``struct bpf_link *``, a kernel link ``fd``, or
    ``detach``, the call that undoes an attachment the kernel keeps without a link (run once, in
    the process that made it; it must not refer to the Link)."""
    link = Link.__new__(Link)
    link._setup(ptr, name, fd, iterator, detach)
    return link
