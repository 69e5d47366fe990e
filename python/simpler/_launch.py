"""How a worker starts its child processes: the program, arguments and environment the native
engines take (``child_program``, ``child_args``, ``child_env``) to run ``python -m
simpler._child``, the program of every chip child and sub worker (``_child.py``).

This module only describes the command line; the engines (``crates/simpler-worker``) start
and watch the children. It must not import ``simpler._child``: a module that the package
imports cannot run as ``python -m`` without a warning.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict

__all__ = ["child_program"]


def child_program() -> Dict[str, Any]:
    """How the engine starts a child: this interpreter running ``simpler._child``, with this
    process's ``sys.path`` as ``PYTHONPATH`` in its environment, so functions pickled by
    reference import there."""
    path = [p for p in sys.path if p]
    old = os.environ.get("PYTHONPATH")
    if old:
        path.extend(p for p in old.split(os.pathsep) if p and p not in path)
    return {
        "child_program": sys.executable,
        "child_args": ["-m", "simpler._child"],
        "child_env": [("PYTHONPATH", os.pathsep.join(path))],
    }
