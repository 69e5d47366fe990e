"""Example manifests (``simpler.toml``), read the way ``simpler build`` reads them.

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
    [[args]]
    name = "A"
    direction = "in"                       # in | out | inout | scalar
    dtype = "f32"
    shape = [512, 512]                     # optional

Source paths are relative to the manifest's folder. Unknown fields are errors, as in the CLI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from . import _native
from .callable import DEFAULT_KERNEL_ENTRY, DEFAULT_ORCHESTRATION_ENTRY, ChipCallable, CoreCallable
from .errors import ArgumentTypeError, InvalidCallableError, InvalidConfigError, SignatureError
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
        """Compiles every source (cached by content) and assembles the callable."""
        from .compiler import KernelCompiler

        kc = compiler or KernelCompiler()
        orch = kc.compile_orchestration("tensormap_and_ringbuffer", self.orchestration_source)
        children = [
            (
                k.func_id,
                CoreCallable(kc.compile_incore(k.source, core_type=k.core), k.core, entry=k.entry),
            )
            for k in self.kernels
        ]
        return ChipCallable.build(
            self.signature, self.orchestration_entry, orch, children, name=self.name
        )


def _fail(path: Path, field: str, reason: str) -> InvalidCallableError:
    return InvalidCallableError(
        f"invalid manifest `{path}`: field `{field}`: {reason}", path=str(path), field=field
    )


def _table(path: Path, value: Any, field: str, allowed: Dict[str, bool]) -> Dict[str, Any]:
    """Checks a table's keys: ``allowed`` maps each key to whether it is required."""
    if not isinstance(value, dict):
        raise _fail(path, field, "expected a table")
    for key in value:
        if key not in allowed:
            raise _fail(path, f"{field}.{key}" if field else key, "unknown field")
    for key, required in allowed.items():
        if required and key not in value:
            raise _fail(path, f"{field}.{key}" if field else key, "missing")
    return value


def _str(path: Path, value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, field, f"expected a non-empty string, got {value!r}")
    return value


def load_manifest(target: "os.PathLike[str] | str") -> Manifest:
    """Loads ``target`` (an example folder, or its ``simpler.toml``)."""
    path = Path(target)
    if path.is_dir():
        path = path / MANIFEST_FILE
    path = path.resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidCallableError(
            f"no manifest: `{path}` does not exist", path=str(path)
        ) from None
    try:
        doc = _native.parse_toml(text)
    except InvalidConfigError as e:
        raise InvalidCallableError(f"invalid manifest `{path}`: {e}", path=str(path)) from e
    root = path.parent
    _table(path, doc, "", {"name": True, "orchestration": True, "kernels": False, "args": False})
    name = _str(path, doc["name"], "name")
    orch = _table(path, doc["orchestration"], "orchestration", {"source": True, "entry": False})
    kernels: List[KernelEntry] = []
    for i, k in enumerate(doc.get("kernels", [])):
        field = f"kernels[{i}]"
        _table(path, k, field, {"func_id": True, "core": True, "source": True, "entry": False})
        if not isinstance(k["func_id"], int) or k["func_id"] < 0:
            raise _fail(path, f"{field}.func_id", f"expected an int >= 0, got {k['func_id']!r}")
        if k["core"] not in ("aic", "aiv"):
            raise _fail(path, f"{field}.core", f'expected "aic" or "aiv", got {k["core"]!r}')
        kernels.append(
            KernelEntry(
                k["func_id"],
                k["core"],
                root / _str(path, k["source"], f"{field}.source"),
                _str(path, k.get("entry", DEFAULT_KERNEL_ENTRY), f"{field}.entry"),
            )
        )
    signature = []
    for i, a in enumerate(doc.get("args", [])):
        field = f"args[{i}]"
        _table(path, a, field, {"name": True, "direction": True, "dtype": True, "shape": False})
        try:
            signature.append(ArgSpec(a["name"], a["direction"], a["dtype"], a.get("shape")))
        except (ArgumentTypeError, SignatureError) as e:
            raise _fail(path, field, str(e)) from e
    manifest = Manifest(
        path=path,
        name=name,
        orchestration_source=root / _str(path, orch["source"], "orchestration.source"),
        orchestration_entry=_str(
            path, orch.get("entry", DEFAULT_ORCHESTRATION_ENTRY), "orchestration.entry"
        ),
        kernels=tuple(kernels),
        signature=tuple(signature),
    )
    for field, source in [("orchestration.source", manifest.orchestration_source)] + [
        (f"kernels[{i}].source", k.source) for i, k in enumerate(manifest.kernels)
    ]:
        if not source.is_file():
            raise _fail(path, field, f"source file `{source}` does not exist")
    return manifest
