"""Writes a skeleton :class:`~pylibbpf._skelmodel.Model` as a Python module.

The text is laid out as ``ruff format`` lays it out (88 columns, double
quotes, two blank lines between top-level definitions; a construct that
does not fit on one line is split one item per line with a trailing comma,
which keeps it split at any line length), so the module is format-clean as
written, and the same model always gives the same bytes. What the module
holds is described in :mod:`pylibbpf.skel`.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ._skelmodel import (
    ArrayRef,
    EnumModel,
    EventSpec,
    MapModel,
    Model,
    Raw,
    Scalar,
    SectionModel,
    StructModel,
    Text,
    TypeRef,
    camel,
    needs_codec,
    read_model,
    stem_of,
)

WIDTH = 88
_SK = "pylibbpf.skel"


# --- a small layout engine: one line when it fits, else one item per line ---------------------

@dataclass(frozen=True)
class Br:
    """``head(items)`` (or ``(items)`` with an empty head): a bracketed list of expressions."""

    head: str
    items: Sequence[str | Br]
    open: str = "("
    close: str = ")"
    tuple_: bool = False  # a one-item tuple keeps its comma


def flat(node: str | Br) -> str:
    if isinstance(node, str):
        return node
    inner = ", ".join(flat(i) for i in node.items)
    if node.tuple_ and len(node.items) == 1:
        inner += ","
    return f"{node.head}{node.open}{inner}{node.close}"


def lay(node: str | Br, indent: int, lead: str = "", tail: str = "") -> list[str]:
    """``node`` at ``indent`` spaces after ``lead`` and before ``tail``, as lines."""
    pad = " " * indent
    one = f"{pad}{lead}{flat(node)}{tail}"
    if isinstance(node, str) or len(one) <= WIDTH or not node.items:
        return [one]
    lines = [f"{pad}{lead}{node.head}{node.open}"]
    for item in node.items:
        lines += lay(item, indent + 4, tail=",")
    lines.append(f"{pad}{node.close}{tail}")
    return lines


# --- types ------------------------------------------------------------------------------------

def slots(t: TypeRef) -> int:
    if isinstance(t, StructModel):
        return sum(slots(f.type) for f in t.fields)
    if isinstance(t, ArrayRef):
        return slots(t.elem) * t.count
    return 1


def fmt(t: TypeRef) -> str:
    """The struct module format of ``t`` (no byte-order prefix)."""
    if isinstance(t, (Scalar, EnumModel)):
        return t.code
    if isinstance(t, (Text, Raw)):
        return f"{t.size}s"
    if isinstance(t, ArrayRef):
        if isinstance(t.elem, (Scalar, EnumModel)):
            return f"{t.count}{t.elem.code}"
        return fmt(t.elem) * t.count
    out, pos = [], 0
    for f in t.fields:
        if f.offset < pos:
            raise ValueError(f"struct {t.cname}: member {f.cname!r} overlaps the one before it")
        if f.offset > pos:
            out.append(f"{f.offset - pos}x")
        out.append(fmt(f.type))
        pos = f.offset + f.type.size
    if t.size > pos:
        out.append(f"{t.size - pos}x")
    return "".join(out)


def annotation(t: TypeRef) -> str:
    if isinstance(t, Scalar):
        return t.py
    if isinstance(t, Text):
        return "str"
    if isinstance(t, Raw):
        return "bytes"
    if isinstance(t, (EnumModel, StructModel)):
        return t.cls
    return f"tuple[{annotation(t.elem)}, ...]"


def ctype(t: TypeRef) -> str:
    """How C spells ``t``, for the docstrings."""
    if isinstance(t, Scalar):
        return t.ctype
    if isinstance(t, Text):
        return f"char[{t.count}]"
    if isinstance(t, Raw):
        return f"union ({t.size} bytes)" if t.union else f"char[{t.size}] (bytes)" if t.chars else f"u8[{t.size}]"
    if isinstance(t, EnumModel):
        return f"enum {t.cname}"
    if isinstance(t, StructModel):
        return f"struct {t.cname}"
    return f"{ctype(t.elem)}[{t.count}]"


def zero(t: TypeRef) -> str:
    """The Python expression of ``t``'s all-zero value."""
    if isinstance(t, Scalar):
        return {"int": "0", "bool": "False", "float": "0.0"}[t.py]
    if isinstance(t, Text):
        return '""'
    if isinstance(t, Raw):
        return 'b""'
    if isinstance(t, EnumModel):
        return f"{t.cls}(0)"
    if isinstance(t, StructModel):
        return f"{t.cls}()"
    return f"({zero(t.elem)},) * {t.count}"


def spec(t: TypeRef) -> str | Br:
    """The :class:`pylibbpf.skel.Spec` expression that writes ``t``."""
    if isinstance(t, Scalar):
        if t.py == "bool":
            return f"{_SK}.Bool()"
        if t.py == "float":
            return f'{_SK}.Float("{t.code}")'
        return f'{_SK}.Int("{t.code}", "{t.ctype}")'
    if isinstance(t, EnumModel):
        return f'{_SK}.Int("{t.code}", "enum {t.cname}")'
    if isinstance(t, Text):
        return f"{_SK}.Text({t.count})"
    if isinstance(t, Raw):
        return f"{_SK}.Raw({t.size})"
    if isinstance(t, StructModel):
        return t.const
    return Br(f"{_SK}.Array", [spec(t.elem), str(t.count)])


def loader(t: StructModel) -> str:
    return f"_load_{t.const.lower()}"


def _slice(c: int, n: int) -> str:
    return f"r[{c}:{c + n}]"


class Loads:
    """Load expressions, and the module-level functions that load an array's elements where an
    element is neither a struct (its own loader) nor a plain value (a slice is its tuple)."""

    def __init__(self) -> None:
        self.functions: dict[str, tuple[str, TypeRef]] = {}  # name -> (annotation, element type)

    def of(self, t: TypeRef, c: int) -> str | Br:
        """The expression reading ``t`` from row ``r`` at slot ``c``."""
        if isinstance(t, (Scalar, Raw)):
            return f"r[{c}]"
        if isinstance(t, Text):
            return f"_text(r[{c}])"
        if isinstance(t, EnumModel):
            return f"{t.cls}(r[{c}])"
        if isinstance(t, StructModel):
            return f"{loader(t)}({_slice(c, slots(t))})"
        elem = t.elem
        if isinstance(elem, (Scalar, Raw)):
            return _slice(c, t.count)
        if isinstance(elem, Text):
            return f"tuple(map(_text, {_slice(c, t.count)}))"
        if isinstance(elem, EnumModel):
            return f"tuple(map({elem.cls}, {_slice(c, t.count)}))"
        return Br(f"{_SK}.items", ["r", str(c), str(slots(elem)), str(t.count), self.element(elem)])

    def element(self, elem: TypeRef) -> str:
        """What loads one element of an array from its own slice (``None``: the slice itself)."""
        if isinstance(elem, StructModel):
            return loader(elem)
        if isinstance(elem, ArrayRef) and isinstance(elem.elem, (Scalar, Raw)):
            return "None"
        name = f"_load_elem{len(self.functions) + 1}"
        for known, (_, t) in self.functions.items():
            if t == elem:
                return known
        self.functions[name] = (annotation(elem), elem)
        return name


def plain(t: StructModel) -> bool:
    """Whether the record is the unpacked values as they are (no field to convert)."""
    return all(isinstance(f.type, (Scalar, Raw)) for f in t.fields)


# --- the module -------------------------------------------------------------------------------

class Emitter:
    def __init__(self, model: Model, *, object_name: str, module_name: str, data: bytes | None,
                 object_path: str | None, events: Sequence[EventSpec], name: str | None,
                 raw_chars: Sequence[str] = ()) -> None:
        self.m = model
        self.object_name, self.module_name = object_name, module_name
        self.data, self.object_path = data, object_path
        self.events, self.name, self.raw_chars = events, name, raw_chars
        self.out: list[str] = []
        self.value_codecs: dict[str, TypeRef] = {}  # constant -> the type it reads and writes
        self.loads = Loads()

    def emit(self) -> str:
        self.header()
        for e in self.m.enums:
            self.enum(e)
        for s in self.m.structs:
            self.struct(s)
        self.codecs()
        self.element_loaders()
        self.skeleton()
        self.object()
        return "\n".join(self.out).rstrip("\n") + "\n"

    def line(self, *lines: str) -> None:
        self.out.extend(lines)

    def blank(self, n: int = 2) -> None:
        while self.out and self.out[-1] == "":
            self.out.pop()
        self.out.extend([""] * n)

    def command(self) -> str:
        words = ["pylibbpf", "skel", self.object_name, "-o", f"{self.module_name}.py"]
        if self.name:
            words += ["--name", self.name]
        for ev in sorted(self.events, key=lambda e: e.map_name):
            words += ["--event", f"{ev.map_name}=struct {ev.struct}"]
        for raw in sorted(set(self.raw_chars)):
            words += ["--raw-chars", raw]
        if self.data is None:
            words.append("--no-embed")
        return " ".join(shlex.quote(w) for w in words)

    def header(self) -> None:
        where = ("Its object is embedded (base64, at the end): the module alone is enough to run."
                 if self.data is not None else
                 f"It opens ``{self.object_path}`` (relative to this module's directory), or the "
                 "object passed to ``open(path)``.")
        command = _wrap(self.command(), 80, shell=True)
        quote = 'r"""' if len(command) > 1 else '"""'
        self.line(f'{quote}Typed skeleton of ``{self.object_name}``, generated by ``pylibbpf skel``: do not edit.',
                  "", "Made by::", "", *(f"    {x}" for x in command), "")
        self.line(*_wrap(where, 88), '"""', "", "from __future__ import annotations", "")
        modules = ["base64"] if self.data is not None else []
        if self.data is None:
            modules.append("pathlib")
        modules.append("typing")
        self.line(*(f"import {x}" for x in sorted(modules)))
        self.line("", "import pylibbpf", "import pylibbpf.skel", "", "_new = tuple.__new__",
                  f"_text = {_SK}.text")

    def enum(self, e: EnumModel) -> None:
        self.blank()
        self.line(f"class {e.cls}({_SK}.SkelEnum):", f'    """``enum {e.cname}``."""', "")
        for attr, _, value in e.members:
            self.line(f"    {attr} = {value}")

    def struct(self, s: StructModel) -> None:
        self.blank()
        self.line(f"class {s.cls}(typing.NamedTuple):", f'    """``struct {s.cname}`` ({s.size} bytes)."""', "")
        for f in s.fields:
            # A field named like a tuple method (count, index) shadows it on purpose.
            ignore = "  # type: ignore[assignment]" if f.attr in ("count", "index") else ""
            self.line(*lay(zero(f.type), 4, f"{f.attr}: {annotation(f.type)} = ", ignore))
        self.blank()
        self.line(f"def {loader(s)}(r: tuple[typing.Any, ...]) -> {s.cls}:")
        if plain(s):
            self.line(f"    return _new({s.cls}, r)")
        else:
            values = Br("", [self.loads.of(f.type, c) for f, c in zip(s.fields, _starts(s))], tuple_=True)
            self.line(*lay(Br("_new", [s.cls, values]), 4, "return "))
        self.blank()
        fields = Br("", [Br("", [f'"{f.attr}"', spec(f.type)]) for f in s.fields], tuple_=True)
        args: list[str | Br] = [_q(f"struct {s.cname}"), f'"<{fmt(s)}"', loader(s), fields, f"zero={s.cls}()"]
        if plain(s):
            args.append("plain=True")
        self.line(*lay(Br(f"{_SK}.Codec", args), 0, f"{s.const}: typing.Final = "))

    def top_load(self, t: TypeRef) -> str | Br:
        """The load expression of a whole value; a bare row value is cast to its type (mypy
        --strict: the row holds Any)."""
        got = self.loads.of(t, 0)
        return Br("typing.cast", [annotation(t), got]) if isinstance(t, (Scalar, Raw)) else got

    def element_loaders(self) -> None:
        """The functions :class:`Loads` asked for (each may ask for more)."""
        done: set[str] = set()
        while len(done) < len(self.loads.functions):
            for name, (ann, elem) in list(self.loads.functions.items()):
                if name in done:
                    continue
                done.add(name)
                self.blank()
                self.line(f"def {name}(r: tuple[typing.Any, ...]) -> {ann}:")
                self.line(*lay(self.top_load(elem), 4, "return "))

    @staticmethod
    def codec_name(t: TypeRef, const: str) -> str:
        """The codec constant of ``t``: a struct's own, else ``const`` (made by :meth:`codecs`)."""
        return t.const if isinstance(t, StructModel) else const

    def codecs(self) -> None:
        """Codecs of the map sides and globals that are no struct but need one (enums...)."""
        for m in self.m.maps:
            for side, t in (("KEY", m.key), ("VALUE", m.value)):
                if t is not None and needs_codec(t) and not isinstance(t, StructModel):
                    self.value_codecs[f"_{m.attr.upper()}_{side}"] = t
        for sec in self.m.sections:
            for v in sec.vars:
                if needs_codec(v.type) and not isinstance(v.type, StructModel):
                    self.value_codecs[f"_{sec.attr.upper()}_{v.attr.upper()}"] = v.type
        for const, t in self.value_codecs.items():
            self.blank()
            self.line(f"def _load{const.lower()}(r: tuple[typing.Any, ...]) -> {annotation(t)}:")
            self.line(*lay(self.top_load(t), 4, "return "))
            self.blank()
            args: list[str | Br] = [_q(ctype(t)), spec(t), f"_load{const.lower()}", zero(t)]
            self.line(*lay(Br(f"{_SK}.value_codec", args), 0, f"{const}: typing.Final = "))

    def skeleton(self) -> None:
        m, name = self.m, self.m.skel
        self.blank()
        self.line(f"class {name}({_SK}.Skeleton):",
                  f'    """The skeleton of ``{self.object_name}``: ``{name}.open()``, then ``load()`` and '
                  '``attach()``."""', "", "    __slots__ = ()", "")
        self.names("OBJECT_NAME", "str", _q(m.stem))
        self.names("MAP_NAMES", "tuple[str, ...]", Br("", [_q(x.name) for x in m.maps], tuple_=True))
        self.names("PROGRAM_NAMES", "tuple[str, ...]", Br("", [_q(p.name) for p in m.progs], tuple_=True))
        keys = [_q(v.key) for s in m.sections for v in s.vars]
        self.names("GLOBAL_NAMES", "tuple[str, ...]", Br("", keys, tuple_=True))
        self.group("Maps", "The object's maps, one attribute per map.", [self.map_property(x) for x in m.maps])
        progs = [[f"def {p.attr}(self) -> pylibbpf.Program:", *_doc(f'``SEC("{p.section}")``.', 12),
                  *lay(Br("self._prog", [_q(p.name)]), 12, "return ")] for p in m.progs]
        self.group("Progs", "The object's programs, one attribute per program.", progs)
        for sec in m.sections:
            self.section(sec)
        self.line("", "    @classmethod")
        if self.data is not None:
            self.line("    def default_object(cls) -> bytes:", '        """The embedded object\'s bytes."""',
                      "        return base64.b64decode(_OBJECT)")
        else:
            self.line("    def default_object(cls) -> pathlib.Path:",
                      '        """The object beside this module."""',
                      f"        return pathlib.Path(__file__).parent / {_q(self.object_path or '')}")
        groups = [("maps", "Maps"), ("progs", "Progs")] + [(s.attr, s.cls) for s in m.sections]
        for attr, cls in groups:
            self.line("", "    @property", f"    def {attr}(self) -> {name}.{cls}:")
            self.line(*lay(Br("self._group", [f"{name}.{cls}"]), 8, "return "))
        for ev in m.events:
            kind = "perf event array" if ev.perf else "ring buffer"
            self.line("", "    @property", f"    def {ev.attr}(self) -> {_SK}.Events[{ev.struct.cls}]:",
                      f'        """The {kind} ``{ev.map_name}``\'s records as ``{ev.struct.cls}`` (once loaded)."""')
            call = Br("self._reader", [_q(ev.map_name), ev.struct.const, f"perf={ev.perf}"])
            self.line(*lay(call, 8, "return "))

    def names(self, attr: str, kind: str, value: str | Br) -> None:
        if isinstance(value, Br) and not value.items:
            value = "()"
        self.line(*lay(value, 4, f"{attr}: typing.ClassVar[{kind}] = "))

    def group(self, cls: str, doc: str, props: list[list[str]], base: str = "Group") -> None:
        """A nested class of properties; each prop's lines are at the method's indentation."""
        self.line("", f"    class {cls}({_SK}.{base}):", f'        """{doc}"""', "", "        __slots__ = ()")
        for prop in props:
            self.line("", "        @property", *(f"        {x}" if x else "" for x in prop[:1]), *prop[1:])

    def map_property(self, m: MapModel) -> list[str]:
        key = annotation(m.key) if m.key is not None else "bytes"
        value = annotation(m.value) if m.value is not None else "bytes"
        if m.per_cpu:
            value = f"tuple[{value}, ...]"
        doc = (f"``{m.name}``: key {ctype(m.key) if m.key else 'bytes'}, value "
               f"{ctype(m.value) if m.value else 'bytes'}{' per CPU' if m.per_cpu else ''}.")
        if needs_codec(m.key) or needs_codec(m.value):
            codecs = [self.codec_name(t, f"_{m.attr.upper()}_{side}") if t is not None and needs_codec(t)
                      else "None" for side, t in (("KEY", m.key), ("VALUE", m.value))]
            body = lay(Br("self._typed_map", [_q(m.name), *codecs]), 12, "return ")
        else:
            body = lay(Br("self._map", [_q(m.name)]), 12, "return ")
        return [f"def {m.attr}(self) -> pylibbpf.Map[{key}, {value}]:", *_doc(doc, 12), *body]

    def section(self, sec: SectionModel) -> None:
        writable = ("set before load() only" if sec.section.startswith(".rodata")
                    else "read and written live once loaded")
        props: list[list[str]] = []
        for v in sec.vars:
            ann = annotation(v.type)
            doc = _doc(f"``{ctype(v.type)} {v.key.rpartition(':')[2]}``.", 12)
            if needs_codec(v.type):
                codec = self.codec_name(v.type, f"_{sec.attr.upper()}_{v.attr.upper()}")
                get = lay(Br("self._get_as", [_q(v.key), codec]), 12, "return ")
                put = lay(Br("self._set_as", [_q(v.key), codec, "value"]), 12)
            else:
                get = lay(Br("typing.cast", [ann, Br("self._get", [_q(v.key)])]), 12, "return ")
                put = lay(Br("self._set", [_q(v.key), "value"]), 12)
            props.append([f"def {v.attr}(self) -> {ann}:", *doc, *get, "", f"        @{v.attr}.setter",
                          f"        def {v.attr}(self, value: {ann}) -> None:", *put])
        self.group(sec.cls, f"The variables of ``{sec.section}`` ({writable}).", props, "Section")

    def object(self) -> None:
        if self.data is None:
            return
        self.blank()
        encoded = base64.b64encode(self.data).decode()
        chunks = [f'"{encoded[i:i + 76]}"' for i in range(0, len(encoded), 76)] or ['""']
        self.line("_OBJECT: typing.Final = (", *(f"    {c}" for c in chunks), ")")


def _q(text: str) -> str:
    """``text`` as a double-quoted Python string literal (as ruff writes one)."""
    return json.dumps(text, ensure_ascii=False)


def _starts(s: StructModel) -> list[int]:
    out, c = [], 0
    for f in s.fields:
        out.append(c)
        c += slots(f.type)
    return out


def _doc(text: str, indent: int) -> list[str]:
    pad = " " * indent
    return [f'{pad}"""{text}"""'] if len(pad) + len(text) + 6 <= WIDTH else \
        [f'{pad}"""{line}' if i == 0 else f"{pad}{line}" for i, line in enumerate(_wrap(text, WIDTH - indent))] + \
        [f'{pad}"""']


def _wrap(text: str, width: int, shell: bool = False) -> list[str]:
    """``text`` in lines of at most ``width`` (longer words alone); ``shell``: a command, its words
    kept whole (quoted ones too) and the lines continued with ``\\``."""
    lines: list[str] = []
    words = shlex.split(text) if shell else text.split()
    for word in (shlex.quote(w) for w in words) if shell else words:
        if lines and len(lines[-1]) + 1 + len(word) <= width - (6 if shell and lines else 0):
            lines[-1] += " " + word
        else:
            lines.append(word)
    if shell:
        lines = [(line if i == 0 else "    " + line) + (" \\" if i < len(lines) - 1 else "")
                 for i, line in enumerate(lines)]
    return lines


def emit(model: Model, *, object_name: str, module_name: str, data: bytes | None = None,
         object_path: str | None = None, events: Sequence[EventSpec] = (), name: str | None = None,
         raw_chars: Sequence[str] = ()) -> str:
    """The module's text: ``data`` embedded, or the object read from ``object_path`` (relative to the
    module's directory) when ``data`` is None."""
    return Emitter(model, object_name=object_name, module_name=module_name, data=data, object_path=object_path,
                   events=events, name=name, raw_chars=raw_chars).emit()


def generate(data: bytes, *, object_name: str, module_name: str, events: Sequence[EventSpec] = (),
             name: str | None = None, object_path: str | None = None, raw_chars: Sequence[str] = ()) -> str:
    """The skeleton module of the object ``data`` (its bytes, named ``object_name``), as text.

    Embeds ``data`` unless ``object_path`` (the object's path relative to the
    module's directory) is given. ``name`` replaces the object's stem in the
    class name (``NameSkel``); ``raw_chars`` names the char arrays read as
    bytes. Errors as :func:`pylibbpf._skelmodel.read_model`.
    """
    model = read_model(data, stem_of(object_name), events, camel(name) + "Skel" if name else None, raw_chars)
    return emit(model, object_name=object_name, module_name=module_name, data=data if object_path is None else None,
                object_path=object_path, events=events, name=name, raw_chars=raw_chars)
