"""setuptools entry for the CFFI extension (everything else is in pyproject.toml).

The sdist is made to build offline: besides the sources it carries the pinned
libbpf source tarball (fetched and sha256-verified by vendor/libbpf/fetch.sh
when the sdist is made, never committed; verified again by the build), the
prebuilt CO-RE objects of the command and libbpf's BPF-side headers. MANIFEST.in
lists the files.
"""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent


class SdistWithLibbpf(sdist):
    """``sdist`` that first makes sure the verified libbpf tarball is in vendor/libbpf/build/.

    fetch.sh honours LIBBPF_TARBALL (a local copy, still verified) and fails
    on a sha256 mismatch, so an sdist never carries an unverified libbpf.
    """

    def run(self) -> None:
        subprocess.run([str(ROOT / "vendor" / "libbpf" / "fetch.sh")], check=True)
        super().run()


setup(
    cffi_modules=["build_ffi.py:ffibuilder"],
    cmdclass={"sdist": SdistWithLibbpf},
    # CFFI builds the extension against the stable ABI (_pylibbpf_cffi.abi3.so):
    # one wheel serves CPython 3.10 and every later version.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
