"""What help() and mypy see of the public API: real signatures, no internal constructor arguments."""

from __future__ import annotations

import inspect
import pydoc

import pytest

import pylibbpf
from pylibbpf import BPFObject, PerfBuffer, RingBuffer


def test_bpf_object_help_shows_no_internals() -> None:
    text = pydoc.render_doc(BPFObject, renderer=pydoc.plaintext)
    assert "keepalive" not in text and "ptr:" not in text and "BPFObject()" in text
    assert list(inspect.signature(BPFObject).parameters) == []
    with pytest.raises(TypeError, match=r"BPFObject is made with BPFObject.open\(path_or_bytes\) or "
                                        r"BPFObject.compile\(source\)"):
        BPFObject()


def test_guarded_reader_methods_keep_their_signatures() -> None:
    for cls in (RingBuffer, PerfBuffer):
        text = pydoc.render_doc(cls.poll, renderer=pydoc.plaintext)
        assert "poll(self, timeout: 'float | None' = None, *, timeout_ms: 'int | None' = None) -> 'int'" in text
        assert "*args" not in text


@pytest.mark.parametrize("name", [n for n in pylibbpf.__all__ if inspect.isclass(getattr(pylibbpf, n))])
def test_no_public_class_shows_internal_constructor_arguments(name: str) -> None:
    cls = getattr(pylibbpf, name)
    params = list(inspect.signature(cls).parameters)
    internal = {"ptr", "owner", "btf", "keepalive", "batch", "with_tags", "alive", "keeper", "m"}
    assert not internal & set(params), f"{name}{inspect.signature(cls)}"
