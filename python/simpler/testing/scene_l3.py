"""Scene tests of level 3: several chips and sub workers driven by a Python orchestration.

A level-3 scene test is a :class:`~simpler.testing.SceneTestCase` decorated with
``@scene_test(level=3)`` whose ``CALLABLE`` names a Python orchestration and the callables it
submits::

    CALLABLE = {
        "orchestration": orch,                  # orch(orch, callables, args, config)
        "callables": [
            {"name": "gemm", "orchestration": {...}, "incores": [...]},   # a chip callable
            {"name": "gemm2", "example": "../../examples/gemm"},         # or an example folder
            {"name": "double", "callable": l3_subs.double_into},         # a sub callable
        ],
    }

The orchestration gets the run's :class:`~simpler.Orchestrator`, ``callables`` (the
registered handles: ``callables.gemm`` or ``callables["gemm"]``), the case's arguments (a
``TaskArgsBuilder`` whose tensors are views of shared memory) and the case's
:class:`~simpler.CallConfig`. It tags the tensors itself, as any level-3 orchestration does.

The worker has ``DEVICE_COUNT`` chips (device ids ``--device`` onwards), ``NUM_SUB_WORKERS``
sub workers (default: 1 when a sub callable is named, else 0) and ``CHIP_ISOLATION``
(``"thread"`` or ``"process"``); a case's ``config`` may override each (``device_count``,
``num_sub_workers``, ``chip_isolation``). Before each case the framework copies every tensor
of ``generate_args`` into one ``create_buffer`` region, so child processes (sub workers,
chips with process isolation) see them in place. There is no one signature to say which
tensors are written, so every tensor is compared with the golden one after each round (the
inputs must come back unchanged), and ``--rounds`` restores every tensor before each round.

This module owns only the level-3 path of the framework and imports nothing from
``scene.py``; the case format, the comparison rule and the pytest options are ``scene.py``'s
and ``plugin.py``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Sequence, Tuple

import numpy as np

from ..callable import CallableHandle, ChipCallable, resolve_example_from
from ..compiler import KernelCompiler
from ..errors import InvalidConfigError
from ..tensor import as_array

__all__ = [
    "SceneCallables",
    "Level3Options",
    "level3_options",
    "build_level3",
    "shared_copies",
    "run_level3",
    "device_ids",
]

L3_CONFIG_KEYS = {"device_count", "num_sub_workers", "chip_isolation"}
ISOLATIONS = ("thread", "process")
_ALIGN = 64  # bytes between the tensors of a case's shared region


class SceneCallables(Mapping[str, CallableHandle]):
    """The handles of a level-3 case's callables by name: ``callables.gemm`` or
    ``callables["gemm"]``."""

    def __init__(self, handles: Dict[str, CallableHandle]) -> None:
        self._handles = dict(handles)

    def __getitem__(self, name: str) -> CallableHandle:
        try:
            return self._handles[name]
        except KeyError:
            raise KeyError(
                f"no callable named {name!r} in CALLABLE['callables'] "
                f"(named: {', '.join(sorted(self._handles)) or 'none'})"
            ) from None

    def __getattr__(self, name: str) -> CallableHandle:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(str(e)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._handles)

    def __len__(self) -> int:
        return len(self._handles)

    def __repr__(self) -> str:
        return f"SceneCallables({', '.join(self._handles)})"


Level3Options = Tuple[int, int, str]
"""(device_count, num_sub_workers, chip_isolation) of a level-3 case's worker."""


def _entries(cls: type) -> List[Dict[str, Any]]:
    spec = cls.CALLABLE  # type: ignore[attr-defined]
    where = f"{cls.__name__}.CALLABLE"
    if not isinstance(spec, dict) or not callable(spec.get("orchestration")):
        raise InvalidConfigError(
            f"{where}: a level-3 scene test's CALLABLE is a dict with 'orchestration' (a Python "
            "function orch(orch, callables, args, config)) and 'callables' (a list)"
        )
    unknown = set(spec) - {"orchestration", "callables"}
    if unknown:
        raise InvalidConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
    entries = spec.get("callables", [])
    if not isinstance(entries, (list, tuple)):
        raise InvalidConfigError(f"{where}['callables'] must be a list of dicts")
    names = set()
    for i, entry in enumerate(entries):
        at = f"{where}['callables'][{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InvalidConfigError(f"{at} must be a dict with a 'name'")
        kinds = [k for k in ("orchestration", "example", "callable") if k in entry]
        if len(kinds) != 1:
            raise InvalidConfigError(
                f"{at} (`{entry['name']}`) needs exactly one of 'orchestration' (with "
                "'incores'), 'example' or 'callable'"
            )
        if entry["name"] in names:
            raise InvalidConfigError(f"{at}: callable name {entry['name']!r} appears twice")
        names.add(entry["name"])
        if "callable" in entry and not callable(entry["callable"]):
            raise InvalidConfigError(f"{at} (`{entry['name']}`): 'callable' is not a function")
    return list(entries)


def _count(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidConfigError(f"{what} must be an int >= {minimum}, got {value!r}")
    return int(value)


def level3_options(cls: type, case: Dict[str, Any]) -> Level3Options:
    """The worker a level-3 case runs on: the class's ``DEVICE_COUNT``, ``NUM_SUB_WORKERS``
    and ``CHIP_ISOLATION``, overridden by the case's ``config``. Raises
    ``InvalidConfigError`` naming the bad value."""
    entries = _entries(cls)
    config = case.get("config", {})
    where = f"{cls.__name__}.CASES[{case.get('name')!r}]"
    count = _count(
        config.get("device_count", getattr(cls, "DEVICE_COUNT", 1)), f"{where}: device_count", 1
    )
    subs = config.get("num_sub_workers", getattr(cls, "NUM_SUB_WORKERS", None))
    if subs is None:
        subs = int(any("callable" in e for e in entries))
    subs = _count(subs, f"{where}: num_sub_workers", 0)
    isolation = config.get("chip_isolation", getattr(cls, "CHIP_ISOLATION", "thread"))
    if isolation not in ISOLATIONS:
        raise InvalidConfigError(
            f"{where}: chip_isolation must be 'thread' or 'process', got {isolation!r}"
        )
    return count, subs, isolation


def build_level3(
    cls: type, compiler: KernelCompiler, build_chip: Callable[..., ChipCallable]
) -> Dict[str, Any]:
    """Each named callable of ``CALLABLE['callables']``: a compiled :class:`ChipCallable`
    (``build_chip(cls, entry, compiler)`` for the ``orchestration``/``incores`` form), or the
    sub callable's function as it is."""
    base = Path(cls.source_dir())  # type: ignore[attr-defined]
    built: Dict[str, Any] = {}
    for entry in _entries(cls):
        name = entry["name"]
        if "callable" in entry:
            built[name] = entry["callable"]
        elif "example" in entry:
            built[name] = ChipCallable.from_example(
                resolve_example_from(base, entry["example"]), compiler
            )
        else:
            built[name] = build_chip(cls, entry, compiler)
    return built


def shared_copies(worker: Any, values: Sequence[Any]) -> List[np.ndarray]:
    """Copies of the host tensors ``values`` in one ``create_buffer`` region of ``worker``
    (each array keeps the region alive), with their shapes and dtypes."""
    arrays = [np.ascontiguousarray(as_array(v)) for v in values]
    offsets, total = [], 0
    for a in arrays:
        offsets.append(total)
        total += -(-max(a.nbytes, 1) // _ALIGN) * _ALIGN
    buf = worker.create_buffer(max(total, _ALIGN))
    copies = []
    for a, off in zip(arrays, offsets):
        view = buf.array(a.shape, a.dtype, off)
        view[...] = a
        copies.append(view)
    return copies


def run_level3(
    worker: Any,
    orchestration: Callable[..., Any],
    built: Dict[str, Any],
    args: Any,
    config: Any,
    rounds: int,
    check: Callable[[], None],
) -> None:
    """Registers ``built`` on ``worker``, then ``rounds`` times: restores every tensor of
    ``args`` (a ``TaskArgsBuilder`` over shared memory) to its first value, runs
    ``orchestration(orch, callables, args, config)`` and calls ``check()``; unregisters
    everything at the end."""
    initial = [np.array(t.value, copy=True) for t in args.tensors]
    handles: Dict[str, CallableHandle] = {}
    try:
        for name, target in built.items():
            handles[name] = worker.register(target)
        callables = SceneCallables(handles)
        for round_index in range(rounds):
            if round_index:
                for t, first in zip(args.tensors, initial):
                    t.value[...] = first
            worker.run(
                lambda orch, _args, cfg: orchestration(orch, callables, args, cfg), None, config
            )
            check()
    finally:
        for handle in handles.values():
            worker.unregister(handle)


def device_ids(first: int, count: int) -> List[int]:
    """The device ids of a level-3 case's chips: ``count`` ids from ``first`` (``--device``)."""
    return list(range(first, first + count))
