"""The exporter's configuration: YAML (or a dict) checked into dataclasses, errors naming file and line.

A configuration names programs; each program names its object (``object:`` a
CO-RE object, or ``source:`` a ``.bpf.c`` compiled at start), the ``globals:``
set before load, and its metrics::

    programs:
      - name: syscalls
        object: syscalls.bpf.o
        globals: {targ_tgid: 0}
        metrics:
          counters:
            - name: syscalls_total          # exported as pylibbpf_syscalls_total
              help: System calls by name
              map: counts
              labels:
                - {name: comm, field: comm, decoders: [{name: string}]}
                - {name: syscall, field: nr, decoders: [{name: syscall}]}
          histograms:
            - name: write_bytes
              help: write() sizes
              map: sizes
              bucket_type: exp2             # exp2 | linear | fixed
              bucket_field: slot            # the key field holding the bucket index
              bucket_multiplier: 1
              bucket_max: 30
              labels: [{name: comm, field: comm, decoders: [{name: string}]}]
          gauges:
            - {name: tasks, help: Tasks seen, map: tasks}

:func:`load` reads a file and raises :class:`ConfigError` (a ValueError) with
``file:line: what is wrong`` for a YAML error, an unknown or missing key, a
value of the wrong type, or an unknown decoder. What needs the object (map
and field names, integer keys for histograms) is checked when the object is
opened (:mod:`pylibbpf.exporter.collector`), with the same file and line.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

#: Metric names get this prefix (``syscalls_total`` -> ``pylibbpf_syscalls_total``).
PREFIX = "pylibbpf_"
#: The histogram bucket types.
BUCKET_TYPES = ("exp2", "linear", "fixed")
#: The decoders a label may chain.
DECODERS = ("uint", "string", "hex", "ksym", "syscall", "static_map", "regexp", "cgroup", "inet_ip", "errno")


class ConfigError(ValueError):
    """A configuration the exporter refuses: ``where`` (``file:line``) and what is wrong."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where


@dataclasses.dataclass(frozen=True)
class Decoder:
    name: str
    static_map: Mapping[str, str] = dataclasses.field(default_factory=dict)
    regexps: tuple[str, ...] = ()
    where: str = ""


@dataclasses.dataclass(frozen=True)
class Label:
    name: str
    field: str | None  # a member of a struct key; None: the whole (scalar) key
    decoders: tuple[Decoder, ...]
    where: str = ""


@dataclasses.dataclass(frozen=True)
class Metric:
    kind: str  # "counter", "gauge", "histogram"
    name: str
    help: str
    map: str
    labels: tuple[Label, ...]
    value: str | None = None  # a member of a struct value (counters, gauges; histograms: an array of counts)
    bucket_type: str = "exp2"
    bucket_field: str | None = None
    bucket_multiplier: float = 1.0
    bucket_min: int = 0
    bucket_max: int = 0
    bucket_keys: tuple[float, ...] = ()
    where: str = ""

    @property
    def full_name(self) -> str:
        return PREFIX + self.name


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    object: str | None
    source: str | None
    globals: Mapping[str, Any]
    metrics: tuple[Metric, ...]
    where: str = ""


@dataclasses.dataclass(frozen=True)
class Config:
    programs: tuple[Program, ...]
    path: str = ""


# --- reading -----------------------------------------------------------------------------------

class _Node:
    """A parsed YAML value with the line it starts on (1-based; 0 for a dict given directly)."""

    def __init__(self, value: Any, line: int, file: str) -> None:
        self.value = value
        self.line = line
        self.file = file

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def fail(self, message: str) -> ConfigError:
        return ConfigError(self.where, message)


def _from_yaml(node: Any, file: str, scalars: Any) -> _Node:
    """The YAML node tree as _Nodes; ``scalars``, a yaml.SafeLoader, types each scalar as YAML says."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        out: dict[str, _Node] = {}
        for key, value in node.value:
            k = _from_yaml(key, file, scalars)
            if not isinstance(k.value, str):
                raise k.fail(f"a key must be a string, got {k.value!r}")
            if k.value in out:
                raise k.fail(f"{k.value!r} is given twice")
            out[k.value] = _from_yaml(value, file, scalars)
        return _Node(out, node.start_mark.line + 1, file)
    if isinstance(node, yaml.SequenceNode):
        return _Node([_from_yaml(v, file, scalars) for v in node.value], node.start_mark.line + 1, file)
    return _Node(scalars.construct_object(node, deep=True), node.start_mark.line + 1, file)


def _from_python(value: Any, file: str) -> _Node:
    if isinstance(value, Mapping):
        return _Node({str(k): _from_python(v, file) for k, v in value.items()}, 0, file)
    if isinstance(value, (list, tuple)):
        return _Node([_from_python(v, file) for v in value], 0, file)
    return _Node(value, 0, file)


def _mapping(node: _Node, what: str, required: Sequence[str], optional: Sequence[str]) -> dict[str, _Node]:
    if not isinstance(node.value, dict):
        raise node.fail(f"{what} must be a mapping, got {_kind(node.value)}")
    unknown = [k for k in node.value if k not in required and k not in optional]
    if unknown:
        bad = node.value[unknown[0]]
        raise ConfigError(bad.where or node.where, f"unknown key {unknown[0]!r} in {what} (known: "
                          f"{', '.join(sorted([*required, *optional]))})")
    for key in required:
        if key not in node.value:
            raise node.fail(f"{what} needs {key!r}")
    return dict(node.value)


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "nothing"}.get(
        type(value), type(value).__name__)


def _string(node: _Node, what: str) -> str:
    if not isinstance(node.value, str) or not node.value:
        raise node.fail(f"{what} must be a non-empty string, got {node.value!r}")
    return node.value


def _number(node: _Node, what: str, *, integer: bool = False) -> Any:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise node.fail(f"{what} must be {'an integer' if integer else 'a number'}, got {value!r}")
    return value


def _list(node: _Node, what: str) -> list[_Node]:
    if node.value is None:
        return []
    if not isinstance(node.value, list):
        raise node.fail(f"{what} must be a list, got {_kind(node.value)}")
    return list(node.value)


def _plain(node: _Node) -> Any:
    if isinstance(node.value, dict):
        return {k: _plain(v) for k, v in node.value.items()}
    if isinstance(node.value, list):
        return [_plain(v) for v in node.value]
    return node.value


def _metric_name(node: _Node, what: str) -> str:
    name = _string(node, what)
    if not (name[0].isalpha() or name[0] == "_") or not all(c.isalnum() or c in "_:" for c in name):
        raise node.fail(f"{what} must be a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), got {name!r}")
    return name


def _decoder(node: _Node, metric: str) -> Decoder:
    if isinstance(node.value, str):  # the short form: decoders: [string, syscall]
        node = _Node({"name": node}, node.line, node.file)
    fields = _mapping(node, f"a decoder of {metric}", ["name"], ["static_map", "regexps"])
    name = _string(fields["name"], "a decoder's name")
    if name not in DECODERS:
        raise fields["name"].fail(f"unknown decoder {name!r} (known: {', '.join(DECODERS)})")
    static: dict[str, str] = {}
    if name == "static_map":
        if "static_map" not in fields or not isinstance(fields["static_map"].value, dict):
            raise node.fail("the static_map decoder needs a 'static_map:' mapping")
        static = {str(k): str(_plain(v)) for k, v in fields["static_map"].value.items()}
    regexps: tuple[str, ...] = ()
    if name == "regexp":
        import re

        if "regexps" not in fields:
            raise node.fail("the regexp decoder needs a 'regexps:' list")
        items = _list(fields["regexps"], "regexps")
        for item in items:
            try:
                re.compile(_string(item, "a regexp"))
            except re.error as e:
                raise item.fail(f"regexp {item.value!r} does not compile: {e}") from None
        regexps = tuple(str(i.value) for i in items)
    return Decoder(name, static, regexps, node.where)


def _label(node: _Node, metric: str) -> Label:
    fields = _mapping(node, f"a label of {metric}", ["name"], ["field", "decoders"])
    field = _string(fields["field"], "a label's field") if "field" in fields else None
    decoders = tuple(_decoder(d, metric) for d in _list(fields.get("decoders", _Node([], 0, "")), "decoders"))
    return Label(_metric_name(fields["name"], "a label's name"), None if field == "key" else field, decoders,
                 node.where)


def _metric(node: _Node, kind: str) -> Metric:
    common = ["name", "help", "map"]
    optional = ["labels", "value"]
    if kind == "histogram":
        optional += ["bucket_type", "bucket_field", "bucket_multiplier", "bucket_min", "bucket_max", "bucket_keys"]
    fields = _mapping(node, f"a {kind}", common, optional)
    name = _metric_name(fields["name"], f"a {kind}'s name")
    labels = tuple(_label(n, name) for n in _list(fields.get("labels", _Node([], 0, "")), "labels"))
    seen = [label.name for label in labels]
    if len(set(seen)) != len(seen):
        raise node.fail(f"{name}: a label name is given twice ({', '.join(seen)})")
    extra: dict[str, Any] = {}
    if kind == "histogram":
        bucket_type = _string(fields.get("bucket_type", _Node("exp2", 0, "")), "bucket_type")
        if bucket_type not in BUCKET_TYPES:
            raise fields["bucket_type"].fail(f"bucket_type must be one of {', '.join(BUCKET_TYPES)}, "
                                             f"got {bucket_type!r}")
        multiplier = _number(fields.get("bucket_multiplier", _Node(1.0, 0, "")), "bucket_multiplier")
        if multiplier <= 0:
            raise fields["bucket_multiplier"].fail(f"bucket_multiplier must be > 0, got {multiplier!r}")
        keys: tuple[float, ...] = ()
        if bucket_type == "fixed":
            if "bucket_keys" not in fields:
                raise node.fail(f"{name}: a fixed histogram needs 'bucket_keys:' (the bucket bounds)")
            keys = tuple(_number(k, "a bucket key") for k in _list(fields["bucket_keys"], "bucket_keys"))
            if not keys or list(keys) != sorted(set(keys)):
                raise fields["bucket_keys"].fail(f"{name}: bucket_keys must be increasing, got {list(keys)}")
        elif "bucket_max" not in fields:
            raise node.fail(f"{name}: an {bucket_type} histogram needs 'bucket_max:' (the last bucket index)")
        bucket_min = _number(fields.get("bucket_min", _Node(0, 0, "")), "bucket_min", integer=True)
        bucket_max = _number(fields["bucket_max"], "bucket_max", integer=True) if "bucket_max" in fields else 0
        if bucket_type != "fixed" and not 0 <= bucket_min <= bucket_max <= 1024:
            raise node.fail(f"{name}: need 0 <= bucket_min <= bucket_max <= 1024, got {bucket_min}, {bucket_max}")
        extra = {"bucket_type": bucket_type, "bucket_multiplier": float(multiplier), "bucket_min": bucket_min,
                 "bucket_max": bucket_max, "bucket_keys": keys,
                 "bucket_field": _string(fields["bucket_field"], "bucket_field") if "bucket_field" in fields
                 else None}
    value = _string(fields["value"], "value") if "value" in fields else None
    return Metric(kind, name, _string(fields["help"], "help"), _string(fields["map"], "map"), labels, value,
                  where=node.where, **extra)


def _program(node: _Node, base: str) -> Program:
    fields = _mapping(node, "a program", ["name"], ["object", "source", "globals", "metrics"])
    name = _string(fields["name"], "a program's name")
    paths = {k: _string(fields[k], k) for k in ("object", "source") if k in fields}
    if len(paths) != 1:
        raise node.fail(f"program {name!r} needs exactly one of 'object:' (a CO-RE object) or 'source:' (a .bpf.c)")
    paths = {k: v if os.path.isabs(v) else os.path.join(base, v) for k, v in paths.items()}
    glob = fields.get("globals", _Node({}, 0, ""))
    if not isinstance(glob.value, dict):
        raise glob.fail(f"globals of {name!r} must be a mapping, got {_kind(glob.value)}")
    metrics_node = fields.get("metrics", _Node({}, 0, ""))
    kinds = _mapping(metrics_node, f"the metrics of {name!r}", [], ["counters", "histograms", "gauges"]) \
        if metrics_node.value else {}
    metrics = tuple(_metric(m, kind[:-1]) for kind in ("counters", "gauges", "histograms")
                    for m in _list(kinds.get(kind, _Node([], 0, "")), kind))
    names = [m.name for m in metrics]
    for m in metrics:
        if names.count(m.name) > 1:
            raise ConfigError(m.where, f"metric {m.name!r} is defined twice in program {name!r}")
    return Program(name, paths.get("object"), paths.get("source"), _plain(glob), metrics, node.where)


def _config(root: _Node, path: str) -> Config:
    fields = _mapping(root, "the configuration", ["programs"], [])
    programs = tuple(_program(p, os.path.dirname(os.path.abspath(path)) if path else os.getcwd())
                     for p in _list(fields["programs"], "programs"))
    if not programs:
        raise fields["programs"].fail("programs is empty: name at least one")
    seen: set[str] = set()
    metric_names: dict[str, str] = {}
    for p in programs:
        if p.name in seen:
            raise ConfigError(p.where, f"program {p.name!r} is defined twice")
        seen.add(p.name)
        for m in p.metrics:
            if m.name in metric_names:
                raise ConfigError(m.where, f"metric {m.name!r} is defined by programs {metric_names[m.name]!r} "
                                  f"and {p.name!r}")
            metric_names[m.name] = p.name
    return Config(programs, path)


def load(path: str | os.PathLike[str]) -> Config:
    """The configuration in the YAML file ``path``. ConfigError (``file:line: what``) when it is refused,
    OSError when it cannot be read."""
    import yaml

    name = os.fspath(path)
    with open(name, encoding="utf-8") as f:
        text = f.read()
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        raise ConfigError(where, f"not valid YAML: {getattr(e, 'problem', None) or e}") from None
    if node is None:
        raise ConfigError(name, "the file is empty")
    return _config(_from_yaml(node, name, yaml.SafeLoader("")), name)


def from_dict(value: Mapping[str, Any], *, name: str = "<config>") -> Config:
    """The configuration held in ``value`` (the YAML's structure as Python values). ConfigError when refused."""
    if not isinstance(value, Mapping):
        raise TypeError(f"config must be a mapping, got {type(value).__name__}")
    return _config(_from_python(value, name), "")


def program_from_dict(value: Mapping[str, Any], *, name: str = "<config>") -> Program:
    """One program's part (``name``, ``metrics``, ...; ``object:`` optional) from Python values."""
    if not isinstance(value, Mapping):
        raise TypeError(f"config must be a mapping, got {type(value).__name__}")
    node = _from_python({"name": "program", "object": "<object>", **value}, name)
    return _program(node, os.getcwd())
