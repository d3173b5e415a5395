"""``Collector``: one loaded object's maps as Prometheus metrics, read when Prometheus scrapes.

A ``prometheus_client`` custom collector: register it with any registry
(``REGISTRY.register(Collector(obj, config))``) and every scrape calls
:meth:`Collector.collect`, which reads each configured map once, with the
kernel's batch lookup (``Map.lookup_batch``), and turns its entries into:

- counters and gauges: one series per key (after the label decoders: keys that
  decode to the same labels are added up), the value or the ``value:`` member
  of a struct value, per-CPU values summed;
- histograms: the bucket index from the key's ``bucket_field`` (or the index in
  an array of counts: the value, or its ``value:`` member), cumulative ``le``
  buckets and ``+Inf``; ``_count`` exact. ``_sum`` is approximate, an upper
  bound: a BPF histogram keeps counts per bucket, not the sum of the values, so
  each value counts as its bucket's ``le`` (one past the last bucket as the last
  ``le``); ``histogram_quantile`` needs only the buckets;
- its own series, labelled ``program``: ``pylibbpf_map_entries`` (a gauge per
  map read), ``pylibbpf_exporter_map_read_errors_total``,
  ``pylibbpf_exporter_decoder_drops_total`` (series a ``regexp`` decoder dropped
  or a decoder refused) and ``pylibbpf_exporter_collect_seconds``.

Bucket bounds (``le``), with ``m`` the ``bucket_multiplier``: ``exp2`` bucket
``i`` counts values in (2^(i-1), 2^i] × m and is exported as ``le = 2^i × m``;
``linear`` bucket ``i`` as ``le = i × m``; ``fixed``: the key's value is the
bound, ``le = key × m``, among ``bucket_keys``. Buckets below ``bucket_min``
count in the first bucket, above ``bucket_max`` (or past the last fixed key) in
``+Inf`` only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ..events import EventDef
from ..maps import Map
from ..object import BPFObject
from . import config as _config
from .decoders import chain

_INTEGER_TYPES = frozenset({"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "bool"})


def _families() -> Any:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    return CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily


def _field_kind(event: EventDef, field: str) -> tuple[str, int]:
    info = event.field(field)
    return info.type, info.count


def _sum_cpus(value: Any) -> Any:
    """A per-CPU value (a tuple of one value per CPU) added up; anything else as it is."""
    if isinstance(value, tuple) and value and not hasattr(value, "_fields"):
        first = value[0]
        if isinstance(first, (int, float)) and not isinstance(first, bool):
            return sum(value)
        if isinstance(first, tuple) and hasattr(first, "_fields"):
            return value  # per-CPU records: summed field by field where read
    return value


class _Bound:
    """A metric checked against its map: how to read labels, the value and the bucket of each entry."""

    def __init__(self, metric: _config.Metric, m: Map, program: str) -> None:
        self.metric = metric
        self.map = m
        self.percpu = False
        key, value = m.key_type, m.value_type
        where = metric.where
        for label in metric.labels:
            if label.field is None:
                if isinstance(key, EventDef):
                    raise _config.ConfigError(label.where or where, f"label {label.name!r} of {metric.name} needs "
                                              f"a 'field:' of map {m.name!r}'s key struct {key.name} (fields: "
                                              f"{', '.join(key.fields)})")
            elif not isinstance(key, EventDef) or label.field not in key.fields:
                have = f"fields: {', '.join(key.fields)}" if isinstance(key, EventDef) else f"the key is {key}"
                raise _config.ConfigError(label.where or where, f"unknown field {label.field!r} for label "
                                          f"{label.name!r} of {metric.name} in map {m.name!r}'s key ({have})")
        self.labels = [(label.field, chain(label.decoders)) for label in metric.labels]
        if metric.value is not None and (not isinstance(value, EventDef) or metric.value not in value.fields):
            have = f"fields: {', '.join(value.fields)}" if isinstance(value, EventDef) else f"the value is {value}"
            raise _config.ConfigError(where, f"unknown value field {metric.value!r} of {metric.name} in map "
                                      f"{m.name!r} ({have})")
        self.array = False
        if metric.kind == "histogram":
            if metric.bucket_field is not None:
                if not isinstance(key, EventDef) or metric.bucket_field not in key.fields:
                    raise _config.ConfigError(where, f"{metric.name}: bucket_field {metric.bucket_field!r} is not a "
                                              f"field of map {m.name!r}'s key")
                kind, count = _field_kind(key, metric.bucket_field)
                if kind not in _INTEGER_TYPES or count != 1:
                    shape = kind + (f"[{count}]" if count > 1 else "")
                    raise _config.ConfigError(where, f"{metric.name}: a histogram needs an integer bucket, and "
                                              f"{metric.bucket_field!r} is {shape}")
            elif self._array_value(value, metric.value):
                self.array = True
            elif isinstance(key, EventDef) or key not in _INTEGER_TYPES or metric.labels:
                raise _config.ConfigError(where, f"{metric.name}: a histogram over a non-integer key (map {m.name!r}'s "
                                          f"key is {key.name if isinstance(key, EventDef) else key}): name the key "
                                          "field holding the bucket with 'bucket_field:'")
        elif metric.value is None and not (isinstance(value, str) and value in _INTEGER_TYPES):
            raise _config.ConfigError(where, f"{metric.name}: map {m.name!r}'s value is "
                                      f"{value.name if isinstance(value, EventDef) else value}: name the member to "
                                      "export with 'value:'")

    @staticmethod
    def _array_value(value: Any, field: str | None) -> bool:
        if isinstance(value, EventDef) and field is not None:
            kind, count = _field_kind(value, field)
            return kind in _INTEGER_TYPES and count > 1
        return False

    def labels_of(self, key: Any) -> tuple[str, ...] | None:
        out = []
        for field, decode in self.labels:
            text = decode(key if field is None else getattr(key, field))
            if text is None:
                return None
            out.append(text)
        return tuple(out)

    def value_of(self, value: Any) -> Any:
        field = self.metric.value
        if isinstance(value, tuple) and value and isinstance(value[0], tuple) and hasattr(value[0], "_fields"):
            parts = [getattr(v, field) if field else v for v in value]  # per-CPU records
            if parts and isinstance(parts[0], tuple):
                return tuple(sum(col) for col in zip(*parts))
            return sum(parts)
        value = _sum_cpus(value)
        return getattr(value, field) if field else value


class Collector:
    """The metrics of ``config`` over the maps of ``obj`` (a loaded :class:`~pylibbpf.BPFObject`).

    ``config`` is one program's part of the exporter's configuration: a mapping
    with ``metrics:`` (``counters``, ``gauges``, ``histograms``, as in the YAML;
    ``name:`` optional, the ``program`` label of the own series), or a
    ``config.Program``. Raises ConfigError naming the metric when a map, a
    field or a histogram's bucket does not fit the object; nothing is read
    until :meth:`collect`. ``collect()`` blocks while it reads the maps; it is
    safe to call from several threads (one at a time). Valid while ``obj`` is open.
    """

    def __init__(self, obj: BPFObject, config: Mapping[str, Any] | _config.Program) -> None:
        program = config if isinstance(config, _config.Program) else _config.program_from_dict(config)
        self.program = program
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {}
        self._drops: dict[str, int] = {}
        bound = []
        for metric in program.metrics:
            try:
                m = obj.maps[metric.map]
            except KeyError:
                raise _config.ConfigError(metric.where, f"unknown map {metric.map!r} for {metric.name} in program "
                                          f"{program.name!r} (maps: {', '.join(obj.maps)})") from None
            bound.append(_Bound(metric, m, program.name))
        self._bound = bound

    def describe(self) -> list[Any]:
        """The metric families without samples (what a registry checks names against at register())."""
        counter, gauge, histogram = _families()
        families: list[Any] = []
        for b in self._bound:
            names = [label.name for label in b.metric.labels]
            cls = {"counter": counter, "gauge": gauge, "histogram": histogram}[b.metric.kind]
            families.append(cls(b.metric.full_name, b.metric.help, labels=names))
        return families

    def collect(self) -> Iterator[Any]:
        """Read every configured map once and yield its metric families, then the collector's own series."""
        counter, gauge, histogram = _families()
        with self._lock:
            started = time.perf_counter()
            rows: dict[str, list[tuple[Any, Any]] | None] = {}
            for b in self._bound:
                if b.metric.map not in rows:
                    try:
                        rows[b.metric.map] = b.map.lookup_batch()
                    except OSError:
                        rows[b.metric.map] = None
                        self._errors[b.metric.map] = self._errors.get(b.metric.map, 0) + 1
            families = []
            for b in self._bound:
                entries = rows[b.metric.map]
                if entries is None:
                    continue
                names = [label.name for label in b.metric.labels]
                if b.metric.kind == "histogram":
                    family = histogram(b.metric.full_name, b.metric.help, labels=names)
                    for labels, (buckets, upper_sum) in self._histograms(b, entries).items():
                        family.add_metric(list(labels), buckets, upper_sum)
                else:
                    cls = counter if b.metric.kind == "counter" else gauge
                    family = cls(b.metric.full_name, b.metric.help, labels=names)
                    for labels, total in self._series(b, entries).items():
                        family.add_metric(list(labels), total)
                families.append(family)
            own = self._own(rows, time.perf_counter() - started)
        yield from families
        yield from own

    def _drop(self, b: _Bound) -> None:
        self._drops[b.metric.name] = self._drops.get(b.metric.name, 0) + 1

    def _labelled(self, b: _Bound, entries: list[tuple[Any, Any]]) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
        """(labels, key, value) of each entry whose labels decode; the others are counted as drops."""
        for key, value in entries:
            try:
                labels = b.labels_of(key)
            except ValueError:  # a decoder refused the field's value
                labels = None
            if labels is None:
                self._drop(b)
                continue
            yield labels, key, value

    def _series(self, b: _Bound, entries: list[tuple[Any, Any]]) -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        for labels, _, value in self._labelled(b, entries):
            out[labels] = out.get(labels, 0) + b.value_of(value)
        return out

    def _histograms(self, b: _Bound, entries: list[tuple[Any, Any]]
                    ) -> dict[tuple[str, ...], tuple[list[tuple[str, float]], float]]:
        metric = b.metric
        slots: dict[tuple[str, ...], dict[int | float, float]] = {}
        for labels, key, value in self._labelled(b, entries):
            counts = slots.setdefault(labels, {})
            if b.array:
                for index, count in enumerate(b.value_of(value)):
                    if count:
                        counts[index] = counts.get(index, 0) + count
            else:
                index = getattr(key, metric.bucket_field) if metric.bucket_field else key
                counts[index] = counts.get(index, 0) + b.value_of(value)
        return {labels: _buckets(metric, counts) for labels, counts in slots.items()}

    def _own(self, rows: Mapping[str, list[tuple[Any, Any]] | None], seconds: float) -> list[Any]:
        counter, gauge, _ = _families()
        name = self.program.name
        entries = gauge("pylibbpf_map_entries", "Entries a configured map held at the last scrape",
                        labels=["program", "map"])
        for map_name, got in rows.items():
            if got is not None:
                entries.add_metric([name, map_name], len(got))
        errors = counter("pylibbpf_exporter_map_read_errors", "Map reads that failed", labels=["program", "map"])
        for map_name in dict.fromkeys(b.metric.map for b in self._bound):
            errors.add_metric([name, map_name], self._errors.get(map_name, 0))
        drops = counter("pylibbpf_exporter_decoder_drops", "Series a label decoder dropped or refused",
                        labels=["program", "metric"])
        for b in self._bound:
            drops.add_metric([name, b.metric.full_name], self._drops.get(b.metric.name, 0))
        took = gauge("pylibbpf_exporter_collect_seconds", "Seconds the last scrape took to read and convert the maps",
                     labels=["program"])
        took.add_metric([name], seconds)
        return [entries, errors, drops, took]


def _bound_of(metric: _config.Metric, index: int | float) -> float | None:
    """The ``le`` of bucket ``index``; None: only in ``+Inf``."""
    m = metric.bucket_multiplier
    if metric.bucket_type == "fixed":
        bigger = [k for k in metric.bucket_keys if k >= index]
        return bigger[0] * m if bigger else None
    if index > metric.bucket_max:
        return None
    index = max(int(index), metric.bucket_min)
    return (2.0 ** index if metric.bucket_type == "exp2" else float(index)) * m


def _buckets(metric: _config.Metric, counts: Mapping[int | float, float]) -> tuple[list[tuple[str, float]], float]:
    """The cumulative buckets (``le`` text, count) ending with ``+Inf``, and the sum's upper bound."""
    if metric.bucket_type == "fixed":
        bounds = [k * metric.bucket_multiplier for k in metric.bucket_keys]
    else:
        step = range(metric.bucket_min, metric.bucket_max + 1)
        bounds = [(2.0 ** i if metric.bucket_type == "exp2" else float(i)) * metric.bucket_multiplier for i in step]
    per_bound = dict.fromkeys(bounds, 0.0)
    total = 0.0
    upper_sum = 0.0
    for index, count in counts.items():
        total += count
        le = _bound_of(metric, index)
        if le is not None:
            per_bound[le] += count
        upper_sum += count * (le if le is not None else bounds[-1])
    out: list[tuple[str, float]] = []
    running = 0.0
    for le in bounds:
        running += per_bound[le]
        out.append((_float_text(le), running))
    out.append(("+Inf", total))
    return out, upper_sum


def _float_text(value: float) -> str:
    return repr(float(value))
