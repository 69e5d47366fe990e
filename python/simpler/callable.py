"""Callables: what a worker registers and runs.

* :class:`CoreCallable` — one compiled kernel (a shared library exporting ``kernel_entry``)
  for one core type (``"aic"`` or ``"aiv"``).
* :class:`ChipCallable` — an orchestration library, its kernels under func ids, and the
  signature: built with :meth:`ChipCallable.build`, read from a bundle made by
  ``simpler build`` (:meth:`ChipCallable.from_bundle`), or compiled from an example folder
  with a ``simpler.toml`` manifest (:meth:`ChipCallable.from_example`).
* :class:`CallableHandle` — what :meth:`Worker.register` returns.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _native
from .errors import ArgumentTypeError, InvalidCallableError, UnsupportedError
from .types import ArgSpec, normalize_signature

if TYPE_CHECKING:  # pragma: no cover
    from .compiler import KernelCompiler

__all__ = [
    "CoreCallable",
    "ChipCallable",
    "CallableHandle",
    "resolve_example",
    "resolve_example_from",
    "example_dirs",
]

DEFAULT_KERNEL_ENTRY = "kernel_entry"
DEFAULT_ORCHESTRATION_ENTRY = "aicpu_orchestration_entry"
PathLike = Union[str, "os.PathLike[str]"]
_MANIFEST = "simpler.toml"


def example_dirs() -> List[Path]:
    """Where a bare example name is looked up, in order: ``$SIMPLER_EXAMPLES_DIR``, the source
    checkout's ``examples/`` (when the package runs from one), the repository's ``examples/``
    as it was when the package was built."""
    dirs = []
    env = os.environ.get("SIMPLER_EXAMPLES_DIR")
    if env:
        dirs.append(Path(env))
    checkout = Path(__file__).resolve().parent.parent.parent / "examples"
    built = Path(_native.EXAMPLES_DIR)
    for d in (checkout, built):
        if d not in dirs and (d.is_dir() or d == built):
            dirs.append(d)
    return dirs


def resolve_example(path: PathLike) -> Path:
    """The example folder (or manifest) ``path`` names; see :meth:`ChipCallable.from_example`.

    A path that exists, or one that is not a bare name, is returned as given (a missing
    manifest is reported when it is loaded); a bare name is looked up in
    :func:`example_dirs`, and :class:`~simpler.InvalidCallableError` lists the places tried
    when none has it."""
    given = Path(os.fspath(path))
    text = os.fspath(path)
    bare = not given.is_absolute() and len(given.parts) == 1 and not text.endswith(".toml")
    if given.exists() or not bare:
        return given
    tried = [str(given.resolve())]
    for d in example_dirs():
        candidate = d / text
        if (candidate / _MANIFEST).is_file():
            return candidate
        tried.append(str(candidate))
    raise InvalidCallableError(
        f"no manifest: there is no example `{text}` (looked for {_MANIFEST} in: "
        + ", ".join(tried)
        + "; set SIMPLER_EXAMPLES_DIR to the folder holding your examples)",
        path=text,
        tried=tried,
    )


def resolve_example_from(base: PathLike, path: PathLike) -> Path:
    """The example ``path`` names for a file in folder ``base`` (a scene test's
    ``{"example": ...}``): ``base / path`` when that exists (a path relative to the test),
    otherwise :func:`resolve_example` of ``path`` — so a bare name (``"vector_add"``) is
    found as :meth:`ChipCallable.from_example` finds it. Raises as :func:`resolve_example`."""
    relative = Path(os.fspath(base)) / os.fspath(path)
    if relative.exists():
        return relative
    return resolve_example(path)


def _core_name(core_type: Any) -> str:
    name = getattr(core_type, "name", core_type)
    if isinstance(name, str) and name.lower() in ("aic", "aiv"):
        return name.lower()
    raise ArgumentTypeError(f"core_type must be 'aic' or 'aiv', got {core_type!r}")


def _as_bytes(binary: Any, what: str) -> bytes:
    if isinstance(binary, (bytes, bytearray, memoryview)):
        return bytes(binary)
    raise ArgumentTypeError(
        f"{what} must be bytes (a shared library image), got {type(binary).__name__}"
    )


class CoreCallable:
    """One kernel: a shared-library image exporting ``entry``, run on ``core_type`` cores.

    ``name`` is what traces, summaries, crash reports and errors call it; ``None``: the entry
    symbol. Names must be unique in a :class:`ChipCallable` and non-empty without control
    characters (checked when the callable is built, ``InvalidCallableError``).

    ``signature`` (the kernel's own argument directions) is informational: the task that
    runs the kernel passes its arguments, and the chip callable's signature is what the host
    checks.
    """

    def __init__(
        self,
        binary: bytes,
        core_type: str = "aiv",
        signature: Sequence[Any] = (),
        entry: str = DEFAULT_KERNEL_ENTRY,
        name: Optional[str] = None,
    ) -> None:
        self.binary = _as_bytes(binary, "binary")
        self.core_type = _core_name(core_type)
        self.signature = tuple(signature)
        if not isinstance(entry, str) or not entry:
            raise ArgumentTypeError(f"entry must be a non-empty symbol name, got {entry!r}")
        self.entry = entry
        if name is not None and not isinstance(name, str):
            raise ArgumentTypeError(f"name must be a str or None, got {type(name).__name__}")
        self.name = name

    @classmethod
    def build(
        cls,
        signature: Sequence[Any] = (),
        binary: bytes = b"",
        *,
        core_type: str = "aiv",
        entry: str = DEFAULT_KERNEL_ENTRY,
        name: Optional[str] = None,
    ) -> "CoreCallable":
        """Upstream's constructor: ``CoreCallable.build(signature, binary)``."""
        return cls(binary, core_type=core_type, signature=signature, entry=entry, name=name)

    def sig(self, i: int) -> Any:
        return self.signature[i]

    @property
    def sig_count(self) -> int:
        return len(self.signature)

    @property
    def binary_size(self) -> int:
        return len(self.binary)

    def buffer_size(self) -> int:
        return len(self.binary)

    def __repr__(self) -> str:
        return f"CoreCallable({self.core_type}, entry={self.entry!r}, {len(self.binary)} bytes)"


class ChipCallable:
    """An orchestration, its kernels and a signature, validated when made.

    The signature is a sequence of :class:`~simpler.ArgSpec` (or ``(name, direction, dtype[,
    shape])`` tuples): tensors first, then scalars. It fixes the order of a run's arguments
    and which host tensors are copied in (``IN``, ``INOUT``) and back (``OUT``, ``INOUT``).
    """

    def __init__(self, native: "_native.Callable") -> None:
        if not isinstance(native, _native.Callable):
            raise ArgumentTypeError("use ChipCallable.build, from_bundle or from_example")
        self._native = native
        self._signature = tuple(ArgSpec(*entry) for entry in native.signature)
        self._hashid: Optional[str] = None

    @classmethod
    def build(
        cls,
        signature: Iterable[Any],
        func_name: str = DEFAULT_ORCHESTRATION_ENTRY,
        binary: bytes = b"",
        children: Sequence[Tuple[int, CoreCallable]] = (),
        config_name: str = "",
        *,
        name: Optional[str] = None,
        runtime: Optional[str] = None,
    ) -> "ChipCallable":
        """Builds a callable from an orchestration image (exporting ``func_name``) and its
        kernels, ``children = [(func_id, CoreCallable), ...]``; ``func_id`` is the id the
        orchestration submits the kernel under, and each kernel is named by its
        ``CoreCallable.name`` (default: its entry symbol); two kernels of one name are an
        ``InvalidCallableError``. ``runtime`` (``"tensormap_and_ringbuffer"``
        or ``"host_build_graph"``) is the variant its runs use unless a run's
        ``CallConfig`` names one; ``None``: the worker's."""
        if config_name:
            raise UnsupportedError(
                "config_name: simpler orchestrations export no config symbol; the signature "
                "fixes the argument count"
            )
        sig = normalize_signature(signature)
        kernels = []
        for i, child in enumerate(children):
            if not (isinstance(child, (tuple, list)) and len(child) == 2):
                raise ArgumentTypeError(f"children[{i}] must be a (func_id, CoreCallable) pair")
            func_id, core = child
            if not isinstance(core, CoreCallable):
                raise ArgumentTypeError(
                    f"children[{i}]: expected a CoreCallable, got {type(core).__name__}"
                )
            if not isinstance(func_id, int) or isinstance(func_id, bool) or func_id < 0:
                raise InvalidCallableError(
                    f"children[{i}]: func_id must be an int >= 0, got {func_id!r}"
                )
            kernels.append((func_id, core.core_type, core.entry, core.binary, core.name))
        native = _native.Callable(
            name or func_name,
            [a.to_native() for a in sig],
            (func_name, _as_bytes(binary, "binary")),
            kernels,
            runtime=runtime,
        )
        return cls(native)

    @classmethod
    def from_bundle(cls, path: PathLike) -> "ChipCallable":
        """Reads a bundle file written by ``simpler build`` (or :meth:`save`)."""
        return cls(_native.Callable.read(os.fspath(path)))

    @classmethod
    def from_bytes(cls, data: bytes) -> "ChipCallable":
        """Parses a bundle's bytes (see :meth:`to_bytes`)."""
        return cls(_native.Callable.from_bytes(_as_bytes(data, "data")))

    @classmethod
    def from_example(
        cls, path: PathLike, compiler: Optional["KernelCompiler"] = None
    ) -> "ChipCallable":
        """Compiles an example folder (or its ``simpler.toml``) like ``simpler build`` does:
        the manifest names the orchestration and kernel sources and the signature.

        ``path`` is used as given when it exists. A bare name that does not (``"gemm"``) is
        looked up as a folder of ``$SIMPLER_EXAMPLES_DIR``, then of the source checkout's
        ``examples/``, then of the repository's ``examples/`` as it was when the package was
        built, so a snippet runs from any directory; the error lists every place tried."""
        from .compiler import KernelCompiler  # local: keeps import of the package light

        kc = compiler or KernelCompiler()
        folder = resolve_example(path)
        return cls(_native.build_example(os.fspath(folder), kc._native))

    def save(self, path: PathLike) -> None:
        """Writes the callable as a bundle file, which ``simpler run`` accepts."""
        self._native.write(os.fspath(path))

    def to_bytes(self) -> bytes:
        """The bundle file's bytes."""
        return self._native.to_bytes()

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def signature(self) -> Tuple[ArgSpec, ...]:
        return self._signature

    @property
    def runtime(self) -> Optional[str]:
        """The runtime variant the callable's runs use unless a run's ``CallConfig`` names
        one (a manifest's ``runtime``, carried in the bundle); ``None``: the worker's."""
        return self._native.runtime

    @property
    def func_name(self) -> str:
        return self._native.orchestration[0]

    @property
    def binary(self) -> bytes:
        """The orchestration image."""
        return self._native.orchestration[1]

    @property
    def binary_size(self) -> int:
        return len(self.binary)

    @property
    def children(self) -> List[Tuple[int, CoreCallable]]:
        return [
            (func_id, CoreCallable(image, core_type=core, entry=entry, name=name))
            for func_id, core, entry, image, name in self._native.kernels
        ]

    @property
    def kernel_names(self) -> Dict[int, str]:
        """func id → the kernel's name, as traces, summaries and crash reports show it."""
        return dict(self._native.kernel_names)

    @property
    def hashid(self) -> str:
        """``"sha256:<hex>"`` of the bundle bytes: equal content, equal id."""
        if self._hashid is None:
            self._hashid = "sha256:" + hashlib.sha256(self.to_bytes()).hexdigest()
        return self._hashid

    def __repr__(self) -> str:
        args = ", ".join(f"{a.name}:{a.direction.short_name}" for a in self._signature)
        return f"ChipCallable({self.name!r}, ({args}), {len(self._native.kernels)} kernels)"


@dataclass(eq=False)
class CallableHandle:
    """A callable registered on one worker (returned by :meth:`Worker.register`).

    Valid only on the worker that issued it; :meth:`Worker.unregister` releases it.
    """

    hashid: str
    name: str
    signature: Tuple[ArgSpec, ...]
    kind: str = "CHIP_CALLABLE"
    target_namespace: str = "LOCAL_CHIP"
    _owner: Any = field(default=None, repr=False)
    _callable: Optional[ChipCallable] = field(default=None, repr=False)
    _native_id: Optional[int] = field(default=None, repr=False)
    _refs: int = field(default=1, repr=False)
    _next_id: Optional[int] = field(default=None, repr=False)
    """Level 4: the engine's id of it for the next-level children (``_native_id`` is then
    its sub callable's)."""

    def __reduce__(self) -> Any:
        # A handle travels (inside a pickled orchestration function) as a foreign handle:
        # the level-3 worker that receives it resolves it by hashid (docs/l4-worker.md §2).
        return (_foreign_handle, (self.hashid, self.name, self.signature, self.kind))

    @property
    def digest(self) -> str:
        """The hex digest of :attr:`hashid`."""
        return self.hashid.split(":", 1)[1]


def _foreign_handle(hashid: str, name: str, signature: Any, kind: str) -> CallableHandle:
    """A handle another worker issued, rebuilt where it was unpickled (no owner)."""
    return CallableHandle(
        hashid=hashid, name=name, signature=tuple(signature), kind=kind,
        target_namespace="FOREIGN",
    )
