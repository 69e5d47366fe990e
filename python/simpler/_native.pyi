"""Type stub of the native module (crates/simpler-py). Internal: use the ``simpler`` API.

Checked against the built module by ``python -m mypy.stubtest simpler._native``
(python/tests/test_stub.py).
"""

from os import PathLike
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple, Union, final

__all__ = [
    "Callable",
    "ChipWorker",
    "RunHandle",
    "RunReport",
    "WorkerConfig",
    "CallConfig",
    "RuntimeEnv",
    "HostTensor",
    "DeviceTensor",
    "RawScalar",
    "encode_scalar",
    "parse_toml",
    "KernelCompiler",
    "compiler_words",
    "default_cache_dir",
    "load_manifest",
    "build_example",
    "allclose",
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
# One run argument per signature entry: a tensor, or a scalar (int, float or RawScalar).
_RunArg = Union["HostTensor", "DeviceTensor", "RawScalar", int, float]
# A ring option: None, one int for every ring, or four.
_RingValue = Union[int, Sequence[int], None]

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
class WorkerConfig:
    def __new__(
        cls,
        *,
        device_id: Optional[int] = None,
        clusters: Optional[int] = None,
        aicpu_threads: Optional[int] = None,
        aicpu_thread_num: Optional[int] = None,
        heap_size: Optional[int] = None,
        task_window: Optional[int] = None,
        run_timeout_s: Optional[float] = None,
        launch_depth: Optional[int] = None,
        scheduler_timeout_s: Optional[float] = None,
        op_execute_timeout_s: Optional[float] = None,
        tensor_data_timeout_s: Optional[float] = None,
        sim_memcheck: Union[bool, str, None] = None,
        sim_executor: Optional[str] = None,
    ) -> WorkerConfig: ...
    @property
    def device_id(self) -> int: ...
    @property
    def clusters(self) -> int: ...
    @property
    def aicpu_threads(self) -> int: ...
    @property
    def aicpu_thread_num(self) -> int: ...
    @property
    def effective_aicpu_thread_num(self) -> int: ...
    @property
    def heap_size(self) -> int: ...
    @property
    def task_window(self) -> int: ...
    @property
    def run_timeout_s(self) -> float: ...
    @property
    def scheduler_timeout_s(self) -> float: ...
    @property
    def op_execute_timeout_s(self) -> float: ...
    @property
    def tensor_data_timeout_s(self) -> float: ...
    @property
    def launch_depth(self) -> int: ...
    @property
    def sim_memcheck(self) -> str: ...
    @property
    def sim_executor(self) -> str: ...

@final
class RuntimeEnv:
    def __new__(
        cls,
        *,
        ring_task_window: _RingValue = None,
        ring_heap: _RingValue = None,
        ring_dep_pool: _RingValue = None,
    ) -> RuntimeEnv: ...
    @property
    def ring_task_window(self) -> Optional[list[int]]: ...
    @property
    def ring_heap(self) -> Optional[list[int]]: ...
    @property
    def ring_dep_pool(self) -> Optional[list[int]]: ...

@final
class CallConfig:
    def __new__(
        cls, *, aicpu_thread_num: Optional[int] = None, runtime_env: Optional[RuntimeEnv] = None
    ) -> CallConfig: ...
    @property
    def aicpu_thread_num(self) -> int: ...
    @property
    def runtime_env(self) -> RuntimeEnv: ...
    def check_fields(self) -> None: ...
    def validate(self, worker: WorkerConfig) -> None: ...

@final
class RunReport:
    @property
    def epoch(self) -> int: ...
    @property
    def device_time_s(self) -> float: ...
    @property
    def total_time_s(self) -> float: ...

@final
class HostTensor:
    def __new__(cls, array: Any, dtype: int) -> HostTensor: ...
    @property
    def array(self) -> Any: ...
    @property
    def dtype(self) -> int: ...

@final
class DeviceTensor:
    def __new__(cls, address: int, shape: Sequence[int], dtype: int) -> DeviceTensor: ...
    @property
    def address(self) -> int: ...
    @property
    def shape(self) -> list[int]: ...
    @property
    def dtype(self) -> int: ...

@final
class RawScalar:
    def __new__(cls, bits: int) -> RawScalar: ...
    @property
    def bits(self) -> int: ...

@final
class RunHandle:
    @property
    def epoch(self) -> int: ...
    def poll(self) -> bool: ...
    def wait(self, timeout: Optional[float] = None) -> None: ...
    def result(self) -> RunReport: ...

@final
class ChipWorker:
    def __new__(cls, config: WorkerConfig) -> ChipWorker: ...
    def register(self, callable: Callable) -> int: ...
    def unregister(self, id: int) -> None: ...
    def run(
        self,
        id: int,
        args: Sequence[_RunArg],
        config: Optional[CallConfig] = None,
    ) -> RunReport: ...
    def submit(
        self,
        id: int,
        args: Sequence[_RunArg],
        config: Optional[CallConfig] = None,
    ) -> RunHandle: ...
    def malloc(self, size: int) -> int: ...
    def free(self, addr: int) -> None: ...
    def copy_to(self, addr: int, src: Any) -> None: ...
    def copy_from(self, dst: Any, addr: int) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def config(self) -> WorkerConfig: ...

def encode_scalar(value: Union[int, float, RawScalar], dtype: Optional[int] = None) -> int: ...
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
def parse_scalar(text: str, dtype: str) -> int: ...
