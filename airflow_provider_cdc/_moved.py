"""Old public import paths of modules that moved higher up the package.

A module left at an old path calls :func:`alias` with the new path as a string: it then IS the moved
module (``from old.path import Name``, ``import old.path``, ``mock.patch("old.path.name")`` and a
serialized classpath under the old path all reach it), while the folder that keeps the old path imports
nothing from the folder the module moved to.
"""

from __future__ import annotations

import importlib
import sys


def alias(old: str, new: str) -> None:
    """Make the module ``old`` (pass ``__name__``) the module ``new``, imported now."""
    sys.modules[old] = importlib.import_module(new)
