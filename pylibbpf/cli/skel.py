"""``pylibbpf skel OBJ.bpf.o [-o MODULE.py] [--name NAME] [--event MAP=struct NAME] [--raw-chars NAME] [--no-embed]``.

Writes the object's typed skeleton module (:func:`pylibbpf.build.skeleton`,
described in :mod:`pylibbpf.skel`) and prints its path. A missing file, an
object libbpf cannot open, one without BTF, or an ``--event`` naming no ring
or perf buffer or no struct, is one line on stderr with exit status 1; a
malformed ``--event`` is a usage error (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .. import build
from .._skelmodel import EventSpec
from ..errors import BPFError
from ._common import write_output


def event_spec(text: str) -> EventSpec:
    """An argparse type: ``MAP=struct NAME``."""
    try:
        return EventSpec.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("event: ")) from None


def add_parser(sub: Any) -> None:
    """Register ``skel`` on the command's subparsers."""
    p = sub.add_parser("skel", help="write a typed Python skeleton of a CO-RE object",
                       description="Write a Python module with one typed class per struct the object's maps, "
                       "globals and events use, and a skeleton class (open, load, attach, close; maps, progs, "
                       "rodata/data/bss, event readers), typed from the object's BTF; mypy --strict checks "
                       "code that uses it.")
    p.add_argument("object", help="the .bpf.o file (compiled with -g: the skeleton is typed from its BTF)")
    p.add_argument("-o", "--output", metavar="MODULE.py",
                   help="the module to write (default: OBJ's name up to its first dot, plus _skel.py, beside it)")
    p.add_argument("--name", help="the class's name before Skel (default: OBJ's name up to its first dot)")
    p.add_argument("--event", dest="events", action="append", default=[], type=event_spec,
                   metavar="MAP=struct NAME",
                   help="the struct a ring buffer or perf event array carries (repeatable); without it, the "
                   "struct of the object's only global pointer to a struct, if any")
    p.add_argument("--raw-chars", action="append", default=[], metavar="NAME",
                   help="read this char array as bytes, not str (repeatable): STRUCT.FIELD, a global, MAP.key, "
                   "MAP.value, or '*' for every one")
    p.add_argument("--no-embed", action="store_true",
                   help="open the object from where it is (relative to the module) instead of embedding it")
    p.add_argument("-v", "--verbose", action="store_true", help="show libbpf's messages")
    p.set_defaults(func=cmd_skel)


def cmd_skel(args: argparse.Namespace) -> int:
    """Write the module; returns the exit status."""
    try:
        out = build.skeleton(args.object, args.output, name=args.name, events=args.events, embed=not args.no_embed,
                             raw_chars=args.raw_chars)
    except BPFError as e:
        sys.stderr.write(f"pylibbpf skel: cannot open {args.object}: {e.strerror} ({e.what})\n")
        return 1
    except KeyError as e:
        sys.stderr.write(f"pylibbpf skel: {e.args[0] if e.args else e}\n")
        return 1
    except (OSError, ValueError, TypeError) as e:
        sys.stderr.write(f"pylibbpf skel: {e}\n")
        return 1
    write_output(sys.stdout, f"{out}\n")
    return 0
