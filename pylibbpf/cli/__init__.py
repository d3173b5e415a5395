"""The ``pylibbpf`` command: live tracing with the bundled CO-RE programs, and object inspection.

::

    pylibbpf trace exec|exit|open [--json] [--duration S] [--pid P] [--comm NAME]
                                  [--sample RATE] [--max-pending N] [--ordered]
                                  [--format table|json|arrow [-o FILE|-]]   (cli/trace.py, cli/arrow_stream.py)
    pylibbpf inspect OBJ.bpf.o [--json] [--struct NAME]        (cli/inspect.py)
    pylibbpf features [--json]                                 (cli/features.py)
    pylibbpf runqlat [--interval S [--count N]] [-m] [--pid P] [--per-process] [--json]   (cli/runqlat.py)
    pylibbpf build PROG.bpf.c [-o PROG.bpf.o] [--skel [--event MAP=struct NAME]]   (cli/build.py)
    pylibbpf skel OBJ.bpf.o [-o MODULE.py] [--name NAME] [--event MAP=struct NAME] [--raw-chars NAME]
                  [--no-embed]   (cli/skel.py)
    pylibbpf profile [--frequency HZ] [--cpu N] [--pid P] [--duration S] [--folded|--json]   (cli/profile.py)
    pylibbpf exporter CONFIG.yaml [--listen HOST:PORT] [--metrics-path /metrics]   (cli/exporter.py)

This module parses the command line and dispatches; each command is a module
of its own (``cli/trace.py``, ``cli/inspect.py``, ``cli/features.py``, ...)
that adds its parser. ``trace`` loads one of the programs built from ``csrc/bpf/`` (package data in
``pylibbpf/bpf/``), sets its load-time configuration (``struct tool_config``
in ``.rodata``: the filters, the output map), attaches it and prints its
events until ``--duration`` ends, Ctrl-C, SIGTERM or a closed stdout. Event
layouts come from the object's BTF; nothing about them is restated here.
``inspect`` opens an object without loading it and lists its programs, maps
and struct layouts.

Errors a person can act on (no privileges, no BTF, no tracefs, a file that is
not a BPF object; stdout closed at the start, an output that cannot be
written) are one line on stderr and exit status 1; usage errors (out-of-range
values and refused combinations included) are one line naming the subcommand's
``--help`` and exit with 2. A summary (events, drops, late events, events/s) goes to stderr at
the end of a trace, which exits 0 on Ctrl-C and on a closed stdout pipe.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..errors import BPFError
from ._common import BUNDLED_DIR as BUNDLED_DIR  # the bundled programs' directory (tests, tools)
from ._common import CommandError
from ._common import Terminate as _Terminate
from ._common import on_sigterm as _on_sigterm
from .build import add_parser as add_build_parser
from .exporter import add_parser as add_exporter_parser
from .features import add_parser as add_features_parser
from .inspect import add_parser as add_inspect_parser
from .profile import add_parser as add_profile_parser
from .runqlat import add_parser as add_runqlat_parser
from .skel import add_parser as add_skel_parser
from .trace import add_parser as add_trace_parser

# --- the command line --------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (plus the exit status 2) pointing at the
    ``--help`` of the command that refused them."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


class _CommandParser(_Parser):
    """A subcommand's parser: an argument it does not know is its own usage error (argparse would
    otherwise hand it up to the top-level parser, whose message points at the wrong --help)."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    """The ``pylibbpf`` command line: one subcommand per tool."""
    return _build()[0]


def _build() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser and each subcommand's own parser, by name (its usage errors name it)."""
    parser = _Parser(prog="pylibbpf", description="Trace, profile and measure the running kernel with bundled "
                     "CO-RE programs; inspect, build and probe BPF objects and this kernel's BPF features.",
                     epilog="`pylibbpf COMMAND --help` describes a command and its options.")
    parser.add_argument("--version", action="version", version=_version_text())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser, metavar="COMMAND")

    add_trace_parser(sub)
    add_inspect_parser(sub)
    add_features_parser(sub)
    add_runqlat_parser(sub)
    add_build_parser(sub)
    add_skel_parser(sub)
    add_profile_parser(sub)
    add_exporter_parser(sub)
    return parser, dict(sub.choices)


def _version_text() -> str:
    from .. import __version__, libbpf_version

    return f"pylibbpf {__version__} (libbpf {libbpf_version()})"


def _setup_logging(verbose: bool) -> None:
    """libbpf's messages go to stderr only with --verbose: errors are reported as one line instead."""
    logger = logging.getLogger("pylibbpf")
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    else:
        logger.addHandler(logging.NullHandler())
    logger.propagate = False


def _prints_on_stdout(args: argparse.Namespace) -> bool:
    """Whether the command's output goes to stdout (every command but ``trace --format arrow -o FILE``)."""
    return not (args.command == "trace" and args.format == "arrow" and args.output != "-")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (the console script's entry point)."""
    parser, commands = _build()
    args = parser.parse_args(argv)
    check = getattr(args, "check_args", None)
    if check is not None:  # the option combinations argparse cannot refuse by itself
        check(commands[args.command], args)
    if sys.stdout is None and _prints_on_stdout(args):
        # started with fd 1 closed (`>&-`): the interpreter has no sys.stdout at all
        if sys.stderr is not None:
            sys.stderr.write(f"pylibbpf {args.command}: stdout is closed: there is nowhere to print the output "
                             "(redirect it to a file or /dev/null)\n")
        return 1
    _setup_logging(args.verbose)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return int(args.func(args))
    except CommandError as e:
        sys.stderr.write(f"pylibbpf {args.command}: {e}\n")
        return 1
    except BPFError as e:
        sys.stderr.write(f"pylibbpf {args.command}: {e.strerror} ({e.what})\n")
        return 1
    except (KeyboardInterrupt, _Terminate):
        return 0  # before tracing started: nothing to summarize
    finally:
        signal.signal(signal.SIGTERM, previous)
