"""The pylibbpf package version (stamped into the compiled module and checked at import)."""

__version__ = "0.2.0"
