"""MkDocs hooks of the documentation site (mkdocs.yml, ``hooks:``).

The docstrings name other objects with Sphinx roles (``:class:`~pylibbpf.Batch```,
``:meth:`read_into```), which help() shows as they are. On the site's pages, a
role and its tilde would read as noise: :func:`on_page_content` keeps the name in
code, the last dotted part where the role has a ``~``, as Sphinx shows it.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|meth|func|data|mod|attr|exc|obj):<code>(~?)([^<]*)</code>")


def _shown(match: re.Match[str]) -> str:
    tilde, name = match.groups()
    return f"<code>{name.rsplit('.', 1)[-1] if tilde else name}</code>"


def on_page_content(html: str, **_: Any) -> str:
    """The page's HTML with every Sphinx role shown as its name in code."""
    return _ROLE.sub(_shown, html)
