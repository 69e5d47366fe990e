"""The :class:`Orchestrator` a level-3 orchestration function ``f(orch, args, cfg)`` gets.

It is valid only while ``f`` runs: every call after ``f`` returned raises
``WorkerStateError``. Its calls add tasks to the run — chip tasks (``submit_next_level``,
``submit_next_level_group``), sub tasks (``submit_sub``, ``submit_sub_group``), copies between
host and chip memory — and manage the run's memory (``alloc``, ``free``,
``alloc_child_tensor``) and scopes. A task's arguments are a :class:`~simpler.TaskArgs`:
tensors with their :class:`~simpler.TensorArgType` tags (which order the tasks), then scalars.

Each call returns the task's id (an int). Errors are raised before the task is added: a wrong
handle, a worker id that is not an int (``ArgumentTypeError``), negative
(``InvalidArgumentError``) or unknown (``InvalidArgumentError`` naming the id and how many
there are), repeated group members, ``args_list`` of another length than ``workers``, a host
array a child process cannot see (naming the argument and the fix).

This module only converts Python objects (arrays, :class:`~simpler.ChildTensor`, numbers) into
the native argument type; the engine checks them (``crates/simpler-py/src/orchestrator.rs``).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Sequence

import numpy as np

from . import _native
from .callable import CallableHandle
from .config import CallConfig
from .errors import ArgumentTypeError, InvalidArgumentError
from .shared_buffer import SharedBuffer
from .tensor import ChildTensor, TaskArgs, Tensor, as_array
from .types import ArgSpec, DataType, TensorArgType, scalar_to_uint64, shape_tuple

if TYPE_CHECKING:  # pragma: no cover
    from .channel import WorkerChipQueue, WorkerChipRegion
    from .comm import CommBufferSpec, CommDomainHandle
    from .host_worker import HostWorker

__all__ = ["Orchestrator"]


class Orchestrator:
    """Builds one level-3 run's task graph (see the module docs)."""

    def __init__(self, native: "_native.Orchestrator", worker: "HostWorker") -> None:
        self._native = native
        self._worker = worker

    @property
    def valid(self) -> bool:
        """True while the orchestration function runs."""
        return bool(self._native.valid)

    # -- tasks ---------------------------------------------------------------------------------

    def submit_next_level(
        self,
        handle: CallableHandle,
        args: Optional[TaskArgs],
        config: Optional[CallConfig] = None,
        *,
        worker: int,
    ) -> int:
        """Runs ``handle`` on next-level worker ``worker`` with ``args``: at level 3 a chip
        callable on chip ``worker``; at level 4 a level-3 orchestration function on child
        ``worker`` (``add_worker`` / ``add_remote_worker``'s id), which gets ``args`` and
        ``config`` as its own."""
        h = self._chip_handle(handle)
        return int(
            self._native.submit_next_level(
                self._next_id(h), self._args(h, args, "args"), self._config(config), worker
            )
        )

    def submit_next_level_group(
        self,
        handle: CallableHandle,
        args_list: Sequence[Optional[TaskArgs]],
        config: Optional[CallConfig] = None,
        *,
        workers: Sequence[int],
    ) -> int:
        """One task of the chips ``workers``: member ``i`` runs ``handle`` on ``workers[i]``
        with ``args_list[i]``; all start together, and the task is over when all are."""
        h = self._chip_handle(handle)
        return int(
            self._native.submit_next_level_group(
                self._next_id(h),
                self._args_list(h, args_list),
                self._config(config),
                self._sequence(workers, "workers"),
            )
        )

    def submit_sub(self, handle: CallableHandle, args: Optional[TaskArgs] = None) -> int:
        """Runs the Python callable ``handle`` on an idle sub worker with ``args`` (its
        tensors must be shared memory: ``create_buffer`` or ``orch.alloc``)."""
        h = self._sub_handle(handle)
        return int(self._native.submit_sub(h._native_id, self._args(h, args, "args")))

    def submit_sub_group(
        self, handle: CallableHandle, args_list: Sequence[Optional[TaskArgs]]
    ) -> int:
        """One task of ``len(args_list)`` members on distinct sub workers."""
        h = self._sub_handle(handle)
        return int(self._native.submit_sub_group(h._native_id, self._args_list(h, args_list)))

    # -- scopes --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def scope(self) -> Iterator["Orchestrator"]:
        """``with orch.scope():`` — allocations made inside are reclaimed once the scope has
        ended and every task naming them is over (scopes nest up to 64 deep)."""
        self.scope_begin()
        try:
            yield self
        finally:
            self.scope_end()

    def scope_begin(self) -> None:
        self._native.scope_begin()

    def scope_end(self) -> None:
        self._native.scope_end()

    # -- memory --------------------------------------------------------------------------------

    def alloc(self, shape: Any, dtype: Any) -> np.ndarray:
        """A tensor from the worker's heap ring: a writable numpy array over shared memory
        (child processes see it in place), reclaimed when its scope has ended and every task
        naming it is over. Waits for reclamation when the ring is full (``RingFullError``
        after the deadlock timeout)."""
        dims = shape_tuple(shape, "shape")
        dt = DataType.of(dtype)
        memory = self._native.alloc(list(dims), int(dt))
        array = np.asarray(memory).view(dt.to_numpy()).reshape(dims)
        plane = self._worker._plane
        if plane is not None:  # level 4: the bytes may be a reclaimed tensor's, sent before
            plane.wrote([array])
        return array

    def free(self, tensor: Any) -> None:
        """Releases an ``alloc`` array early (reclaimed once the tasks naming it are over), or
        frees ``alloc_child_tensor`` memory."""
        if isinstance(tensor, ChildTensor):
            self._native.free(tensor._native)
        elif isinstance(tensor, np.ndarray):
            self._native.free(_native.HostTensor(tensor, int(DataType.from_numpy(tensor.dtype))))
        else:
            raise ArgumentTypeError(
                "free takes an array from orch.alloc or a ChildTensor, got "
                f"{type(tensor).__name__}"
            )

    def allocate_domain(
        self,
        name: str,
        workers: Sequence[int],
        window_size: int,
        buffers: Sequence["CommBufferSpec"] = (),
    ) -> "CommDomainHandle":
        """A comm domain of the chips ``workers`` (rank = position), each with a zeroed window
        of ``window_size`` bytes holding ``buffers`` (:class:`~simpler.CommBufferSpec`), all
        in one shared mapping (``docs/comm.md``). Use it as ``with orch.allocate_domain(...)
        as dom:``; ``dom[chip]`` is that chip's :class:`~simpler.ChipDomainContext`.
        Everything is checked before anything is made: a wrong value raises
        ``InvalidArgumentError`` naming it (``name``, ``workers``, ``window_size``,
        ``buffers[i].name``, ``buffers[i].count``, ``buffers``)."""
        from .comm import CommBufferSpec, CommDomainHandle, _int

        if not isinstance(name, str):
            raise ArgumentTypeError(
                f"name must be a str, got {type(name).__name__}", arg="name", reason="not a str"
            )
        if isinstance(workers, (str, bytes)) or not isinstance(workers, Sequence):
            raise ArgumentTypeError(
                f"workers must be a sequence of chip ids, got {type(workers).__name__}",
                arg="workers",
                reason="not a sequence",
            )
        size = _int(window_size, "window_size")
        if isinstance(buffers, (str, bytes, CommBufferSpec)) or not isinstance(buffers, Sequence):
            raise ArgumentTypeError(
                f"buffers must be a sequence of CommBufferSpec, got {type(buffers).__name__}",
                arg="buffers",
                reason="not a sequence",
            )
        specs = []
        for i, b in enumerate(buffers):
            if not isinstance(b, CommBufferSpec):
                raise ArgumentTypeError(
                    f"buffers[{i}] must be a CommBufferSpec, got {type(b).__name__}",
                    arg=f"buffers[{i}]",
                    reason="not a CommBufferSpec",
                )
            specs.append(b._wire(i))
        native = self._native.allocate_domain(name, list(workers), size, specs)
        return CommDomainHandle(native, self)

    def create_worker_chip_region(
        self, worker_id: int, payload_bytes: int, counter_bytes: int
    ) -> "WorkerChipRegion":
        """An L3↔L2 region with chip ``worker_id``: ``payload_bytes`` of payload and
        ``counter_bytes`` (a positive multiple of 4) of ``uint32`` counters, zeroed and mapped
        on the chip (``docs/comm.md`` §7). Pass :attr:`~simpler.WorkerChipRegion.descriptor`
        to the chip task as six scalars (``region.add_descriptor(args)``). It works until
        freed or until this orchestration returns."""
        from .channel import WorkerChipRegion
        from .comm import _int

        native = self._native.create_worker_chip_region(
            worker_id, _int(payload_bytes, "payload_bytes"), _int(counter_bytes, "counter_bytes")
        )
        return WorkerChipRegion(native)

    def create_worker_chip_queue(
        self, worker_id: int, depth: int, input_arena_bytes: int, output_arena_bytes: int
    ) -> "WorkerChipQueue":
        """An L3↔L2 message queue with chip ``worker_id`` (``docs/comm.md`` §8): input and
        output rings of ``depth`` slots (a power of two) and arenas of the given bytes
        (positive multiples of 64), on one region; pass ``queue.descriptor`` to the chip task
        (``queue.add_descriptor(args)``)."""
        from .channel import WorkerChipQueue
        from .comm import _int

        native = self._native.create_worker_chip_queue(
            worker_id,
            _int(depth, "depth"),
            _int(input_arena_bytes, "input_arena_bytes"),
            _int(output_arena_bytes, "output_arena_bytes"),
        )
        return WorkerChipQueue(native)

    def alloc_child_tensor(self, worker: int, shape: Any, dtype: Any) -> ChildTensor:
        """Persistent device memory on chip ``worker`` (zeroed): never reclaimed by the
        engine, freed by :meth:`free` or at close."""
        dims = shape_tuple(shape, "shape")
        return ChildTensor(
            self._native.alloc_child_tensor(worker, list(dims), int(DataType.of(dtype)))
        )

    def copy_to(self, dst: ChildTensor, src: Any) -> int:
        """A task copying host memory ``src`` into chip memory ``dst``; ordered like any task
        (``dst`` written, ``src`` read)."""
        if not isinstance(dst, ChildTensor):
            raise ArgumentTypeError(f"copy_to: dst must be a ChildTensor, got {type(dst).__name__}")
        return int(self._native.copy_to(dst._native, _host_item(src, "copy_to source")))

    def copy_from(self, dst: Any, src: ChildTensor) -> int:
        """A task copying chip memory ``src`` into host memory ``dst``."""
        if not isinstance(src, ChildTensor):
            raise ArgumentTypeError(
                f"copy_from: src must be a ChildTensor, got {type(src).__name__}"
            )
        return int(self._native.copy_from(_host_item(dst, "copy_from destination", True), src._native))

    # -- conversion ----------------------------------------------------------------------------

    def _chip_handle(self, handle: Any) -> CallableHandle:
        return self._worker._own_handle(handle)

    def _next_id(self, h: CallableHandle) -> Any:
        """The engine's id of ``h`` for a next-level task (level 4: its children's; a chip
        callable is refused there, it runs inside a level-3 orchestration)."""
        if self._worker.level < 4:
            return h._native_id
        if h.kind == "CHIP_CALLABLE":
            raise ArgumentTypeError(
                f"`{h.name}` is a chip callable; a level-{self._worker.level} task runs a "
                f"level-{self._worker.level - 1} orchestration function f(orch, args, config) "
                "on a child: submit the chip callable from inside one (its handle works there)"
            )
        if h._next_id is None:
            raise InvalidArgumentError(
                f"`{h.name}` has no next-level worker to run on: this worker has no children "
                "(add_worker / add_remote_worker)",
                arg="handle",
                reason="no next-level workers",
            )
        return h._next_id

    def _sub_handle(self, handle: Any) -> CallableHandle:
        h = self._worker._own_handle(handle)
        if h._native_id is None:
            raise InvalidArgumentError(
                f"`{h.name}` has no sub worker to run on: this worker has none "
                "(num_sub_workers=0)",
                arg="handle",
                reason="no sub workers",
            )
        return h

    def _config(self, config: Optional[CallConfig]) -> Optional["_native.CallConfig"]:
        if config is None:
            return None
        if not isinstance(config, CallConfig):
            raise ArgumentTypeError(f"config must be a CallConfig, got {type(config).__name__}")
        return config._for_worker(self._worker)

    @staticmethod
    def _sequence(value: Any, what: str) -> List[Any]:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, range)):
            raise ArgumentTypeError(f"{what} must be a list, got {type(value).__name__}")
        return list(value)

    def _args_list(self, handle: CallableHandle, args_list: Any) -> List["_native.HostTaskArgs"]:
        items = self._sequence(args_list, "args_list")
        return [self._args(handle, a, f"args_list[{i}]") for i, a in enumerate(items)]

    def _args(self, handle: CallableHandle, args: Any, what: str) -> "_native.HostTaskArgs":
        """The native form of one task's arguments. For a chip callable each tag must agree
        with its signature entry and each scalar is encoded by the entry's dtype; a sub
        callable's scalars travel as 64-bit integers (floats as f32 bits)."""
        if args is None:
            args = TaskArgs()
        if not isinstance(args, TaskArgs):
            raise ArgumentTypeError(f"{what} must be a TaskArgs, got {type(args).__name__}")
        sig = handle.signature
        tensor_specs: List[Optional[ArgSpec]] = [s for s in sig if s.direction.is_tensor]
        scalar_specs: List[Optional[ArgSpec]] = [s for s in sig if not s.direction.is_tensor]
        if len(tensor_specs) != args.tensor_count() or len(scalar_specs) != args.scalar_count():
            # Unpaired: the chip names the count mismatch; encode by the values' own types.
            tensor_specs = [None] * args.tensor_count()
            scalar_specs = [None] * args.scalar_count()
        tensors, tags = [], []
        for i, spec in enumerate(tensor_specs):
            tensor, tag = args.tensor(i), args.tag(i)
            name = f"{what}[{i}]" if spec is None else f"{what}[{i}] (`{spec.name}`)"
            if spec is not None and not tag.agrees_with(spec.direction):
                reason = f"tag {tag.name} does not agree with the signature's {spec.direction.name}"
                raise InvalidArgumentError(f"argument {name}: {reason}", arg=name, reason=reason)
            if isinstance(tensor, ChildTensor):
                tensors.append(tensor._native)
            else:
                tensors.append(_host_item(tensor, name, tag is not TensorArgType.INPUT))
            tags.append(int(tag))
        scalars = []
        for i, spec in enumerate(scalar_specs):
            name = f"{what} scalar {i}" if spec is None else f"{what} scalar {i} (`{spec.name}`)"
            try:
                scalars.append(
                    scalar_to_uint64(args.scalar(i), None if spec is None else spec.dtype)
                )
            except (InvalidArgumentError, ArgumentTypeError) as e:
                raise type(e)(f"argument {name}: {e}", arg=name, reason=str(e)) from None
        return _native.HostTaskArgs(tensors, tags, scalars)


def _host_array(value: Any, what: str, writable: bool = False) -> np.ndarray:
    """The numpy array behind a host tensor argument (no copy)."""
    if isinstance(value, Tensor):
        if value.is_device:
            raise ArgumentTypeError(
                f"{what}: a level-2 device Buffer cannot be used at level 3; allocate chip "
                "memory with orch.alloc_child_tensor(worker, shape, dtype)"
            )
        assert value.array is not None
        return value.array
    if isinstance(value, SharedBuffer):
        return value.array()
    return as_array(value, writable=writable, what=what)


def _host_item(value: Any, what: str, writable: bool = False) -> "_native.HostTensor":
    """A host tensor argument as the engine takes it: its array (no copy) and dtype."""
    arr = _host_array(value, what, writable)
    try:
        dtype = DataType.from_numpy(arr.dtype)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"argument {what}: {e}", arg=what, reason=str(e)) from None
    return _native.HostTensor(arr, int(dtype))
