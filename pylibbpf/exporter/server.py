"""``Exporter``: a configuration's programs loaded, attached and served over HTTP to Prometheus.

``Exporter(config)`` opens each program (``object:``, or ``source:`` compiled
with :meth:`BPFObject.compile`), sets its ``globals:``, loads and attaches it
(``attach_all()``) and builds its :class:`~pylibbpf.exporter.Collector`, all in
a registry of its own. ``serve(host, port)`` starts a threaded HTTP server:

- ``GET /metrics`` (or the ``metrics_path`` given): the registry in the
  Prometheus text format, or OpenMetrics when the ``Accept`` header asks for
  ``application/openmetrics-text`` (``prometheus_client``'s negotiation);
  every map is read at that moment;
- ``GET /healthz``: ``ok`` while the programs are attached.

Beside the collectors' series, the exporter's own:
``pylibbpf_exporter_programs_attached`` (links per program) and
``pylibbpf_exporter_scrape_duration_seconds`` (a summary of the scrapes served).
``close()`` stops the server and closes every object (detaching its programs);
it is idempotent, the exporter is a context manager, and a finalizer closes
what was left open.
"""

from __future__ import annotations

import http.server
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from ..errors import BPFError
from ..object import BPFObject
from . import config as _config
from .collector import Collector


def _close_all(objects: list[BPFObject]) -> None:
    for obj in objects:
        obj.close()


class Exporter:
    """The programs of ``config`` (a :class:`config.Config`) loaded, attached and collected.

    Raises ConfigError (file:line) for a global, map or field the object does
    not have; BPFError (or LoadError) when the kernel refuses to load or attach
    a program; CompileError when a ``source:`` does not compile. What was
    opened before the error is closed.
    """

    def __init__(self, config: _config.Config) -> None:
        from prometheus_client import CollectorRegistry, Summary

        self.config = config
        self.registry = CollectorRegistry(auto_describe=True)
        self._objects: list[BPFObject] = []
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._finalizer = weakref.finalize(self, _close_all, self._objects)
        try:
            for program in config.programs:
                obj = self._open(program)
                self.registry.register(Collector(obj, program))
        except BaseException:
            self.close()
            raise
        self.registry.register(_Attached(self._objects, [p.name for p in config.programs]))
        self._scrapes = Summary("pylibbpf_exporter_scrape_duration_seconds", "Seconds each scrape took to serve",
                                registry=self.registry)

    def _open(self, program: _config.Program) -> BPFObject:
        if program.source is not None:
            obj = BPFObject.compile(program.source)
        else:
            assert program.object is not None
            obj = BPFObject.open(program.object)
        self._objects.append(obj)
        for name, value in program.globals.items():
            try:
                obj.globals[name] = value
            except KeyError:
                raise _config.ConfigError(program.where, f"program {program.name!r} has no global {name!r} "
                                          f"(globals: {', '.join(obj.globals)})") from None
            except (TypeError, ValueError) as e:
                raise _config.ConfigError(program.where, f"program {program.name!r}: {e}") from None
        obj.load()
        obj.attach_all()
        return obj

    @property
    def objects(self) -> list[BPFObject]:
        """The loaded objects, in the configuration's order."""
        return list(self._objects)

    def scrape(self, accept: str = "") -> tuple[bytes, str]:
        """(body, content type) of one scrape in the format ``accept`` asks for (text by default)."""
        from prometheus_client.exposition import choose_encoder

        started = time.perf_counter()
        encoder, content_type = choose_encoder(accept)
        body = encoder(self.registry)
        self._scrapes.observe(time.perf_counter() - started)
        return body, content_type

    def serve(self, host: str = "", port: int = 9435, metrics_path: str = "/metrics") -> tuple[str, int]:
        """Serve HTTP in a thread of its own; returns the (host, port) bound (port 0: one the kernel chose).
        OSError when the address cannot be bound."""
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == metrics_path:
                    try:
                        body, content_type = exporter.scrape(self.headers.get("Accept", ""))
                        status = 200
                    except (BPFError, OSError, ValueError) as e:
                        body, content_type, status = f"scrape failed: {e}\n".encode(), "text/plain", 500
                elif path == "/healthz":
                    healthy = bool(exporter._objects) and all(not o.closed for o in exporter._objects)
                    body, content_type = (b"ok\n", "text/plain") if healthy else (b"closed\n", "text/plain")
                    status = 200 if healthy else 503
                else:
                    body, content_type, status = f"not found; metrics are at {metrics_path}\n".encode(), \
                        "text/plain", 404
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # no line per scrape on stderr

        server = http.server.ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="pylibbpf-exporter", daemon=True)
        self._thread.start()
        bound = server.server_address
        return str(bound[0]), int(bound[1])

    def close(self) -> None:
        """Stop serving and close every object (its programs detach). Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        _close_all(self._objects)

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Attached:
    """``pylibbpf_exporter_programs_attached``: the links each program's object keeps."""

    def __init__(self, objects: list[BPFObject], names: list[str]) -> None:
        self._objects = objects
        self._names = names

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily("pylibbpf_exporter_programs_attached", "Links each configured program keeps",
                                   labels=["program"])
        for name, obj in zip(self._names, self._objects):
            family.add_metric([name], 0 if obj.closed else len(obj.links))
        yield family
