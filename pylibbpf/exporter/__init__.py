"""BPF maps as Prometheus metrics: ``pylibbpf exporter CONFIG.yaml``, and the same as a library.

::

    from prometheus_client import REGISTRY, start_http_server
    from pylibbpf.exporter import Collector

    REGISTRY.register(Collector(obj, {"metrics": {"counters": [
        {"name": "events_total", "help": "Events", "map": "counts"}]}}))
    start_http_server(9435)

Modules: :mod:`~pylibbpf.exporter.config` (the YAML, checked, errors with file
and line), :mod:`~pylibbpf.exporter.decoders` (label decoders),
:mod:`~pylibbpf.exporter.collector` (:class:`Collector`: maps read per scrape,
with batch lookups), :mod:`~pylibbpf.exporter.server` (:class:`Exporter`:
programs loaded, attached and served over HTTP). ``prometheus_client`` and
PyYAML come with the ``exporter`` extra (``pip install 'pylibbpf-cffi[exporter]'``).
"""

from __future__ import annotations

from .collector import Collector
from .config import Config, ConfigError, from_dict, load
from .server import Exporter

__all__ = ["Collector", "Config", "ConfigError", "Exporter", "from_dict", "load"]
