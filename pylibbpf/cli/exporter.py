"""``pylibbpf exporter CONFIG.yaml [--listen HOST:PORT] [--metrics-path /metrics]``: BPF maps as metrics.

Loads and attaches every program of the configuration
(:mod:`pylibbpf.exporter.config` describes it), then serves Prometheus'
text format (OpenMetrics when asked) at ``--metrics-path`` and ``ok`` at
``/healthz`` until SIGTERM or Ctrl-C, which detach everything and exit 0.
Every scrape reads the maps then. A configuration the objects do not fit is
refused at start: one line on stderr with the file, the line and what is
wrong, exit status 1.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from typing import Any

from ..errors import BPFError
from ._common import CommandError, Terminate, privilege_error

#: Where the exporter listens when --listen is not given (ebpf_exporter's port is 9435 too).
DEFAULT_LISTEN = ":9435"


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``[IPV6]:PORT`` as (host, port); ArgumentTypeError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (or :PORT), got {text!r}")
    return host.strip("[]"), int(port)


def _check_listen(host: str, port: int) -> None:
    """CommandError when ``host:port`` cannot be bound now (in use, no such address)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server binds
            s.bind((host, port))
    except OSError as e:
        raise CommandError(f"cannot listen on {host or '*'}:{port}: {e.strerror}") from e


def cmd_exporter(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or Ctrl-C; 0 then, 1 for a configuration or a load refused at start."""
    try:
        from ..exporter import ConfigError, Exporter, load
    except ImportError as e:
        raise CommandError(f"{e.name} is missing: install the exporter extra "
                           "(pip install 'pylibbpf-cffi[exporter]')") from e
    host, port = args.listen
    try:
        config = load(args.config)
        _check_listen(host, port)  # a taken port is refused before any program loads
        exporter = Exporter(config)
    except ConfigError as e:
        raise CommandError(str(e)) from e
    except BPFError as e:
        if e.errno in (1, 13):
            raise privilege_error(e) from e
        raise CommandError(f"{e.strerror} ({e.what})") from e
    except (OSError, RuntimeError) as e:
        raise CommandError(str(e)) from e
    with exporter:
        try:
            bound = exporter.serve(host, port, args.metrics_path)
        except OSError as e:
            raise CommandError(f"cannot listen on {host or '*'}:{port}: {e.strerror}") from e
        n = len(config.programs)
        sys.stderr.write(f"pylibbpf exporter: {n} program{'s' if n != 1 else ''} attached; serving "
                         f"http://{bound[0] or '0.0.0.0'}:{bound[1]}{args.metrics_path}\n")
        sys.stderr.flush()
        try:
            while True:
                signal.pause()
        except (KeyboardInterrupt, Terminate):
            pass
    return 0


def add_parser(sub: Any) -> None:
    """Register ``exporter`` on the command's subparsers."""
    p = sub.add_parser("exporter", help="serve BPF maps as Prometheus metrics",
                       description="Load and attach the programs of a YAML configuration and serve their maps "
                       "as Prometheus metrics, read at each scrape.")
    p.add_argument("config", help="the YAML configuration (see docs/exporter.md)")
    p.add_argument("--listen", type=listen_address, default=listen_address(DEFAULT_LISTEN), metavar="HOST:PORT",
                   help=f"where to serve (default {DEFAULT_LISTEN}: every address)")
    p.add_argument("--metrics-path", default="/metrics", metavar="PATH", help="the metrics' path (default /metrics)")
    p.add_argument("-v", "--verbose", action="store_true", help="show libbpf's messages and verifier logs")
    p.set_defaults(func=cmd_exporter)
