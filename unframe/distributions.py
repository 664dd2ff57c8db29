"""Installed versions of Python distributions, for reports, provenance and runner names.

One cached lookup for the whole package: reading package metadata costs 1-20 ms a call and
versions don't change within a process. Never imports the package itself.
"""

from __future__ import annotations

import functools
from importlib import metadata


@functools.cache
def dist_version(*names: str) -> str:
    """The version of the first of ``names`` that is installed, '' when none is."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return ""
