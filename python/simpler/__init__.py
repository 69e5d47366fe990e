"""simpler — run task graphs of C kernels on a simulated Ascend-style NPU, from Python.

A short session::

    import numpy as np
    from simpler import ChipCallable, Worker

    callable = ChipCallable.from_example("examples/vector_add")   # compiles the C sources
    a = np.random.rand(1 << 20).astype(np.float32)
    b = np.random.rand(1 << 20).astype(np.float32)
    c = np.empty_like(a)
    with Worker(level=2, platform="sim") as w:
        h = w.register(callable)
        w.init()
        w.run(h, [a, b, c])                     # c = a + b
    assert np.allclose(c, a + b)

Everything public is importable from this module; see ``Worker``, ``TaskArgs``,
``KernelCompiler``, ``ChipCallable`` and ``simpler.testing`` (scene tests). ``Worker(level=3,
...)`` drives several chips and sub workers from a Python orchestration (``HostWorker``,
``Orchestrator``); ``Worker(level=2, chip_isolation="process")`` runs the chip in a child
process (``IsolatedWorker``). ``Worker(level=4, ...)`` drives level-3 workers in this process
(``add_worker``) and in Ray actors on other hosts (``add_remote_worker(RemoteWorkerSpec(...))``).
``Worker(level=2, runtime="host_build_graph")`` builds each run's graph on the host;
``Worker.record`` keeps one to replay (``RecordedRun``).
"""

from . import _native, sim  # noqa: F401 - simpler.sim: caller contexts on the sim platform
from .callable import CallableHandle, ChipCallable, CoreCallable
from .compiler import KernelCompiler, include_dir
from .config import CallConfig, RuntimeEnv
from .errors import *  # noqa: F401,F403 - the exception classes are part of the API
from .errors import __all__ as _error_names
from .host_worker import HostWorker
from .isolated_worker import IsolatedWorker
from .orchestrator import Orchestrator
from .remote import RemoteWorkerSpec
from .runs import GraphReport, HostRunHandle, HostRunReport, RunHandle, RunReport
from .shared_buffer import SharedBuffer
from .tensor import Buffer, ChildTensor, TaskArgs, Tensor, as_array
from .channel import (
    NotifyOp,
    QueueMessage,
    QueueOpcode,
    RegionCounter,
    WaitCmp,
    WorkerChipQueue,
    WorkerChipRegion,
)
from .comm import ChipDomainContext, CommBufferSpec, CommDomainHandle
from .types import (
    ArgDirection,
    ArgSpec,
    DataType,
    TensorArgType,
    scalar_to_uint64,
    uint64_to_scalar,
)
from .worker import RecordedRun, Worker

__version__ = _native.__version__

__all__ = [
    "Worker",
    "RunHandle",
    "RunReport",
    "GraphReport",
    "RecordedRun",
    "HostWorker",
    "IsolatedWorker",
    "HostRunHandle",
    "HostRunReport",
    "Orchestrator",
    "RemoteWorkerSpec",
    "SharedBuffer",
    "ChildTensor",
    "ChipDomainContext",
    "CommBufferSpec",
    "CommDomainHandle",
    "NotifyOp",
    "QueueMessage",
    "QueueOpcode",
    "RegionCounter",
    "WaitCmp",
    "WorkerChipQueue",
    "WorkerChipRegion",
    "ChipCallable",
    "CoreCallable",
    "CallableHandle",
    "KernelCompiler",
    "include_dir",
    "CallConfig",
    "RuntimeEnv",
    "TaskArgs",
    "Tensor",
    "Buffer",
    "as_array",
    "ArgDirection",
    "ArgSpec",
    "DataType",
    "TensorArgType",
    "scalar_to_uint64",
    "uint64_to_scalar",
] + list(_error_names)
