"""``python -m pylibbpf``: the ``pylibbpf`` command (see :mod:`pylibbpf.cli`)."""

import sys

from .cli import main

sys.exit(main())
