"""Example manifests (``simpler.toml``), read by the same parser as ``simpler build``.

::

    name = "gemm"
    [orchestration]
    source = "orchestration.c"
    entry = "aicpu_orchestration_entry"    # optional, this is the default
    [[kernels]]
    func_id = 0
    core = "aic"                           # "aic" | "aiv"
    source = "kernels/gemm_tile.c"
    entry = "kernel_entry"                 # optional, this is the default
    name = "gemm_tile"                     # optional, unique; default: the source's stem
    [[args]]
    name = "A"
    direction = "in"                       # in | out | inout | scalar
    dtype = "f32"
    shape = [512, 512]                     # optional

Source paths are relative to the manifest's folder. Unknown fields are errors. The parsing,
the checks and their messages are the native toolchain's (``docs/toolchain.md``); this
module only turns its result into Python objects.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Tuple

from . import _native
from .callable import ChipCallable
from .types import ArgSpec

if TYPE_CHECKING:  # pragma: no cover
    from .compiler import KernelCompiler

MANIFEST_FILE = "simpler.toml"


@dataclass(frozen=True)
class KernelEntry:
    func_id: int
    core: str
    source: Path
    entry: str
    name: str
    """The kernel's name in traces, summaries and crash reports: the manifest's ``name``,
    else the source file's stem."""


@dataclass(frozen=True)
class Manifest:
    """A loaded manifest; paths are absolute."""

    path: Path
    name: str
    orchestration_source: Path
    orchestration_entry: str
    kernels: Tuple[KernelEntry, ...]
    signature: Tuple[ArgSpec, ...]

    def build(self, compiler: Optional["KernelCompiler"] = None) -> ChipCallable:
        """Compiles every source (cached by content) and assembles the callable, as
        ``simpler build`` does: same flags, every entry symbol checked."""
        from .compiler import KernelCompiler

        kc = compiler or KernelCompiler()
        return ChipCallable(_native.build_example(os.fspath(self.path), kc._native))


def load_manifest(target: "os.PathLike[str] | str") -> Manifest:
    """Loads ``target`` (an example folder, or its ``simpler.toml``); every source it names
    must exist. Errors are :class:`~simpler.InvalidCallableError` naming the file and field."""
    path, name, (orch_source, orch_entry), kernels, signature = _native.load_manifest(
        os.fspath(Path(target).resolve())
    )
    return Manifest(
        path=Path(path),
        name=name,
        orchestration_source=Path(orch_source),
        orchestration_entry=orch_entry,
        kernels=tuple(KernelEntry(f, c, Path(s), e, n) for f, c, s, e, n in kernels),
        signature=tuple(ArgSpec(*a) for a in signature),
    )
