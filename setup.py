"""setuptools entry for the CFFI extension (everything else is in pyproject.toml)."""

from setuptools import setup

setup(cffi_modules=["build_ffi.py:ffibuilder"])
