"""``pylibbpf build PROG.bpf.c [-o PROG.bpf.o] [--skel]``: compile a BPF C program into a CO-RE object.

The same compile as :func:`pylibbpf.build.compile` (clang, libbpf's BPF
headers from the package, a vmlinux.h generated for this kernel and cached);
``--print-include-dir`` and ``--print-vmlinux-h`` give those paths to a
Makefile that runs clang itself; ``--skel`` also writes the object's typed
skeleton beside it (``PROG_skel.py``, as ``pylibbpf skel``). Prints the
object's path (and the skeleton's), and clang's warnings on stderr; a missing
clang, a missing file or clang's errors are reported on stderr with exit
status 1.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from typing import Any

from .. import build
from ..errors import BPFError
from ._common import write_output
from .skel import event_spec


def add_parser(sub: Any) -> None:
    """Register ``build`` on the command's subparsers (``sub`` from ``add_subparsers``)."""
    p = sub.add_parser("build", help="compile a BPF C program into a CO-RE object (needs clang)",
                       description="Compile a BPF C program with clang into a CO-RE object. "
                       "#include \"vmlinux.h\" (generated for this kernel) and <bpf/bpf_helpers.h>, "
                       "<bpf/bpf_tracing.h>, <bpf/bpf_core_read.h> ... (libbpf's, shipped with pylibbpf) "
                       "work without any -I.")
    p.add_argument("source", nargs="?", help="the .bpf.c file")
    p.add_argument("-o", "--output", metavar="OBJ", help="the object to write (default: SOURCE with .o)")
    p.add_argument("-I", dest="include", action="append", default=[], metavar="DIR", help="add an include directory")
    p.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VALUE]", help="define a macro")
    p.add_argument("--cflags", default="", metavar="FLAGS",
                   help="more clang options, one shell-quoted string: --cflags='-DX=1 -Wall'")
    p.add_argument("--skel", action="store_true",
                   help="also write the object's typed skeleton beside it (PROG_skel.py; see `pylibbpf skel`)")
    p.add_argument("--event", dest="events", action="append", default=[], type=event_spec,
                   metavar="MAP=struct NAME", help="with --skel: the struct a ring or perf buffer carries")
    p.add_argument("--raw-chars", action="append", default=[], metavar="NAME",
                   help="with --skel: a char array the skeleton reads as bytes (see `pylibbpf skel --help`)")
    p.add_argument("--print-include-dir", action="store_true", help="print the BPF headers' -I directory and exit")
    p.add_argument("--print-vmlinux-h", action="store_true", help="print the path of this kernel's vmlinux.h and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="show the clang command line")
    p.set_defaults(func=cmd_build, check_args=check_args)


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--event`` or ``--raw-chars`` without ``--skel`` is a usage error (exit 2)."""
    if (args.events or args.raw_chars) and not args.skel:
        parser.error(f"{'--event' if args.events else '--raw-chars'} describes the skeleton: it needs --skel")


def _fail(message: str) -> int:
    sys.stderr.write(f"pylibbpf build: {message}\n")
    return 1


def cmd_build(args: argparse.Namespace) -> int:
    """Compile (or print a path); returns the exit status."""
    try:
        if args.print_include_dir or args.print_vmlinux_h:
            for wanted, path in ((args.print_include_dir, build.include_dir),
                                 (args.print_vmlinux_h, build.vmlinux_h)):
                if wanted:
                    write_output(sys.stdout, path() + "\n")
            return 0
        if args.source is None:
            return _fail("a source file is needed (pylibbpf build PROG.bpf.c [-o PROG.bpf.o])")
        cflags = [f"-I{d}" for d in args.include] + [f"-D{d}" for d in args.define] + shlex.split(args.cflags)
        with warnings.catch_warnings(record=True) as diagnostics:
            warnings.simplefilter("always", build.CompileWarning)
            out = build.compile(args.source, args.output, cflags=cflags)
        for diagnostic in diagnostics:
            sys.stderr.write(f"{diagnostic.message}\n")
        skel = build.skeleton(out, events=args.events, raw_chars=args.raw_chars) if args.skel else None
    except BPFError as e:  # libbpf could not read the kernel's BTF for vmlinux.h, or open the object
        return _fail(f"{e.strerror} ({e.what})")
    except KeyError as e:  # an --event struct the object's BTF lacks
        return _fail(str(e.args[0] if e.args else e))
    except (OSError, RuntimeError, ValueError) as e:  # CompileError is a RuntimeError
        return _fail(str(e))
    write_output(sys.stdout, f"{out}\n" + (f"{skel}\n" if skel is not None else ""))
    return 0
