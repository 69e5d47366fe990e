"""Type stub of the native module (crates/simpler-py). Internal: use the ``simpler`` API."""

from os import PathLike
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple, Union, final

__all__ = [
    "Callable",
    "ChipWorker",
    "RunHandle",
    "parse_toml",
    "KernelCompiler",
    "compiler_words",
    "default_cache_dir",
    "load_manifest",
    "build_example",
    "allclose",
    "encode_scalar",
    "parse_scalar",
    "EXAMPLES_DIR",
    "MAX_TENSOR_DIMS",
    "MAX_CALLABLES",
    "MAX_FUNC_ID",
    "__version__",
]

__version__: str
MAX_TENSOR_DIMS: int
MAX_CALLABLES: int
MAX_FUNC_ID: int
# The repository's examples/ as it was when the extension was built.
EXAMPLES_DIR: Path

# (name, direction, dtype, shape or None) with manifest names: "in", "f32"...
_ArgTuple = Tuple[str, str, str, Optional[Sequence[int]]]
# ("host", ndarray) | ("device", address, nbytes, shape) | ("scalar", bits)
_RunArg = Tuple[Any, ...]
_Report = Tuple[int, float, float]
# (aicpu_thread_num, ring_task_window, ring_heap, ring_dep_pool): each ring value None, or 1 or 4 ints.
_NativeConfig = Tuple[int, Optional[Sequence[int]], Optional[Sequence[int]], Optional[Sequence[int]]]

@final
class Callable:
    def __new__(
        cls,
        name: str,
        signature: Sequence[_ArgTuple],
        orchestration: Tuple[str, bytes],
        kernels: Sequence[Tuple[int, str, str, bytes]],
    ) -> Callable: ...
    @staticmethod
    def read(path: Union[str, PathLike[str]]) -> Callable: ...
    @staticmethod
    def from_bytes(data: bytes) -> Callable: ...
    def write(self, path: Union[str, PathLike[str]]) -> None: ...
    def to_bytes(self) -> bytes: ...
    @property
    def name(self) -> str: ...
    @property
    def signature(self) -> list[Tuple[str, str, str, Optional[list[int]]]]: ...
    @property
    def orchestration(self) -> Tuple[str, bytes]: ...
    @property
    def kernels(self) -> list[Tuple[int, str, str, bytes]]: ...

@final
class RunHandle:
    @property
    def epoch(self) -> int: ...
    def poll(self) -> bool: ...
    def wait(self, timeout: Optional[float] = None) -> None: ...
    def result(self) -> _Report: ...

@final
class ChipWorker:
    def __new__(
        cls,
        *,
        clusters: int = 8,
        aicpu_threads: int = 4,
        aicpu_thread_num: int = 0,
        heap_size: int = ...,
        task_window: Optional[int] = None,
        run_timeout_s: float = 50.0,
        launch_depth: Optional[int] = None,
    ) -> ChipWorker: ...
    def register(self, callable: Callable) -> int: ...
    def unregister(self, id: int) -> None: ...
    def run(
        self, id: int, args: Sequence[_RunArg], config: Optional[_NativeConfig] = None
    ) -> _Report: ...
    def submit(
        self, id: int, args: Sequence[_RunArg], config: Optional[_NativeConfig] = None
    ) -> RunHandle: ...
    def malloc(self, size: int) -> int: ...
    def free(self, addr: int) -> None: ...
    def copy_to(self, addr: int, src: Any) -> None: ...
    def copy_from(self, dst: Any, addr: int) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def config(self) -> Tuple[int, int, int, int, int, float, int]: ...

def parse_toml(text: str) -> dict[str, Any]: ...

# -- the toolchain (crates/simpler-toolchain): compiler and cache, manifests, comparison ------

_StrPath = Union[str, PathLike[str]]
# (index, actual, expected)
_Element = Tuple[int, float, float]
# (total, mismatches, max_abs_err, first mismatch, worst mismatch)
_CompareReport = Tuple[int, int, float, Optional[_Element], Optional[_Element]]
# (path, name, (orchestration source, entry), [(func_id, core, source, entry)], signature)
_Manifest = Tuple[
    Path,
    str,
    Tuple[Path, str],
    list[Tuple[int, str, Path, str]],
    list[Tuple[str, str, str, Optional[list[int]]]],
]

@final
class KernelCompiler:
    def __new__(
        cls,
        cc: Sequence[str],
        include_dirs: Sequence[_StrPath],
        extra_flags: Sequence[str],
        cache_dir: Optional[_StrPath] = None,
    ) -> KernelCompiler: ...
    def compile(
        self,
        source: _StrPath,
        core: Optional[str] = None,
        flags: Sequence[str] = ...,
        include_dirs: Sequence[_StrPath] = ...,
    ) -> bytes: ...
    def cache_path(
        self, source: _StrPath, core: Optional[str] = None, flags: Sequence[str] = ...
    ) -> Path: ...
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def cache_dir(self) -> Path: ...

def compiler_words(cc: Optional[str] = None) -> list[str]: ...
def default_cache_dir() -> Path: ...
def load_manifest(target: _StrPath) -> _Manifest: ...
def build_example(target: _StrPath, compiler: KernelCompiler) -> Callable: ...
def allclose(
    actual: bytes,
    expected: bytes,
    dtype: str,
    rtol: float,
    atol: float,
    equal_nan: bool = False,
) -> _CompareReport: ...
def encode_scalar(value: Union[int, float], dtype: str) -> int: ...
def parse_scalar(text: str, dtype: str) -> int: ...
