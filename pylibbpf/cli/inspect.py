"""``pylibbpf inspect``: describe a BPF object file without loading it.

::

    pylibbpf inspect OBJ.bpf.o [--json] [--struct NAME]

It opens the object (no privileges needed) and lists its programs, maps and
the layouts of its BTF structs, as a table or as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..btf import printable_name
from ..errors import BPFError
from ..object import BPFObject
from ._common import CommandError, write_output


def describe_object(obj: BPFObject, only: str | None = None) -> dict[str, Any]:
    """Programs, maps and struct layouts of an opened (not loaded) object, as plain data."""
    programs = [{"name": p.name, "section": p.section, "type": p.type_name} for p in obj.programs.values()]
    maps = [{"name": m.name, "type": m.type_name, "key_size": m.key_size, "value_size": m.value_size,
             "max_entries": m.max_entries} for m in obj.maps.values()]
    structs: list[dict[str, Any]] = []
    try:
        names = obj.btf_struct_names()
    except BPFError:
        names = []  # no BTF: nothing to describe
    for name in names:
        if only is not None and name != only:
            continue
        try:
            event = obj.btf_struct(name)
        except (ValueError, KeyError) as e:  # bitfields, floats, a malformed BTF: no EventDef for them
            reason = str(e.args[0] if e.args else e).removeprefix(f"struct {name}: ")
            structs.append({"name": printable_name(name), "error": printable_name(reason)})
            continue
        structs.append({"name": printable_name(name), "size": event.size, "fields": [
            {"name": printable_name(f.name), "type": f.type, "count": f.count, "offset": f.offset, "size": f.size}
            for f in event.field_infos]})
    if only is not None and not structs:
        raise CommandError(f"{obj.name} has no struct named {only!r} in its BTF")
    type_names = {name: obj.globals.type_of(name) for name in obj.globals}
    global_vars = [{"name": name, "section": obj.globals.section(name),
                    "type": t if isinstance(t, str) else f"struct {t.name}"} for name, t in type_names.items()]
    return {"object": obj.name, "programs": programs, "maps": maps, "globals": global_vars, "structs": structs}


def _table(rows: Sequence[Sequence[object]], headers: Sequence[str], right: frozenset[int]) -> list[str]:
    """Rows as aligned text columns (``right``: indexes of right-aligned columns), indented."""
    cells = [list(map(str, headers))] + [list(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return ["  " + "  ".join(c.rjust(w) if i in right else c.ljust(w)
                             for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in cells]


def format_description(info: dict[str, Any]) -> str:
    """The human-readable form of :func:`describe_object`'s result."""
    out = [f"object {info['object']}", "", f"programs ({len(info['programs'])})"]
    out += _table([(p["name"], p["type"], p["section"]) for p in info["programs"]],
                  ("NAME", "TYPE", "SECTION"), frozenset())
    out += ["", f"maps ({len(info['maps'])})"]
    out += _table([(m["name"], m["type"], m["key_size"], m["value_size"], m["max_entries"]) for m in info["maps"]],
                  ("NAME", "TYPE", "KEY", "VALUE", "MAX_ENTRIES"), frozenset({2, 3, 4}))
    out += ["", f"globals ({len(info['globals'])})"]
    out += _table([(g["name"], g["section"], g["type"]) for g in info["globals"]],
                  ("NAME", "SECTION", "TYPE"), frozenset())
    out += ["", f"structs ({len(info['structs'])})"]
    for s in info["structs"]:
        if "error" in s:
            out.append(f"  struct {s['name']}: no event layout: {s['error']}")
            continue
        out.append(f"  struct {s['name']} ({s['size']} bytes)")
        rows = [(f["offset"], f["size"], f["type"] + (f"[{f['count']}]" if f["count"] > 1 else ""), f["name"])
                for f in s["fields"]]
        out += ["  " + line for line in _table(rows, ("OFFSET", "SIZE", "TYPE", "FIELD"), frozenset({0, 1}))]
    return "\n".join(out)


def cmd_inspect(args: argparse.Namespace) -> int:
    """``pylibbpf inspect OBJ``: open (never load) and describe."""
    path = args.object
    if not os.path.exists(path):
        raise CommandError(f"{path}: no such file")
    try:
        obj = BPFObject.open(path)
    except BPFError as e:
        raise CommandError(f"{path}: not a BPF object file ({e.strerror})") from e
    with obj:
        info = describe_object(obj, args.struct)
    text = json.dumps(info, indent=2) if args.json else format_description(info)
    write_output(sys.stdout, text + "\n")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``inspect`` to the command's subparsers."""
    inspect = sub.add_parser("inspect", help="describe a BPF object file without loading it",
                             description="List the programs, maps and BTF struct layouts of a BPF object "
                             "(opened, not loaded: no privileges needed).")
    inspect.add_argument("object", help="a BPF ELF object (.bpf.o)")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.add_argument("--struct", metavar="NAME", help="only this struct")
    inspect.add_argument("-v", "--verbose", action="store_true", help="show libbpf's messages")
    inspect.set_defaults(func=cmd_inspect)
