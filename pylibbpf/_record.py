"""The records an :class:`~pylibbpf.events.EventDef` parses into: tuples with one attribute per field.

Each EventDef makes its own subclass of :class:`EventRecord` (its
``record_type``), whose attributes are the field names with dots turned into
underscores (:func:`attr_name`). A pickled record travels with its EventDef.
"""

from __future__ import annotations

import keyword
from typing import TYPE_CHECKING, Any, ClassVar


class EventRecord(tuple):  # type: ignore[type-arg]
    """Base class of the records :meth:`EventDef.parse` returns.

    A record is a tuple of the field values in field order, with one read-only
    attribute per field (see the module docstring for the names of dotted
    fields).  Each :class:`EventDef` has its own subclass, ``EventDef.record_type``.
    """

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _event: ClassVar[Any]  # its EventDef (events.py imports this module, not the other way)

    if TYPE_CHECKING:
        # Field attributes are made per event at run time; tell type checkers
        # that any attribute may exist.  No __getattr__ exists at run time: an
        # unknown attribute raises AttributeError as usual.
        def __getattr__(self, name: str) -> Any: ...

    def _asdict(self) -> dict[str, Any]:
        """Return ``{field name: value}`` in field order, dotted names kept."""
        return dict(zip(self._fields, self))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self))
        return f"{type(self).__name__}({inner})"

    def __reduce__(self) -> tuple[Any, ...]:
        # The per-event classes are made at run time and cannot be found by
        # name: a pickled record travels with its EventDef and is rebuilt as a
        # record of the unpickled definition.
        return (rebuild_record, (self._event, tuple(self)))


def rebuild_record(event: Any, values: tuple[Any, ...]) -> EventRecord:
    """A pickled record, rebuilt as a record of its (unpickled) EventDef."""
    record: EventRecord = event.record_type(values)
    return record


# Only the record's own underscore names (``_asdict``, ``_fields``...) and dunders are kept
# from fields: a field named like a public tuple method (``count``, ``index``) gets that
# attribute, which then returns the field's value (the method is shadowed on that record type).
_RESERVED_ATTRS = frozenset(n for n in dir(EventRecord) if n.startswith("_")) | {"_fields", "_event"}


def attr_name(field: str) -> str:
    """The record attribute of field ``field``: dots become underscores; a keyword or reserved name gets ``_``."""
    attr = field.replace(".", "_")
    if keyword.iskeyword(attr) or attr in _RESERVED_ATTRS:
        attr += "_"
    return attr
