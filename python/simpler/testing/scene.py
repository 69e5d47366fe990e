"""Scene tests: a callable, some cases, inputs, and an independent golden result.

A scene test is a class derived from :class:`SceneTestCase` (optionally decorated with
:func:`scene_test`) whose name starts with ``Test``::

    @scene_test(level=2, runtime="tensormap_and_ringbuffer")
    class TestVectorAdd(SceneTestCase):
        CALLABLE = {
            "orchestration": {
                "source": "../../examples/vector_add/orchestration.c",
                "function_name": "aicpu_orchestration_entry",
                "signature": [("a", "in", "f32"), ("b", "in", "f32"), ("c", "out", "f32")],
            },
            "incores": [
                {"func_id": 0, "source": "../../examples/vector_add/kernels/add.c",
                 "core_type": "aiv"},
            ],
        }
        CASES = [{"name": "small", "params": {"n": 4096}}]

        def generate_args(self, params):
            a = np.random.default_rng(0).random(params["n"], dtype=np.float32)
            ...
            return TaskArgsBuilder(TensorArg("a", a), TensorArg("b", b), TensorArg("c", c))

        def compute_golden(self, args, params):
            args.c[:] = args.a + args.b

Source paths are relative to the file defining the class. ``CALLABLE`` may also be a path to
an example folder with a ``simpler.toml`` (``{"example": "../../examples/gemm"}``).

For each case the framework compiles the callable once per class (the
:class:`~simpler.KernelCompiler` cache makes later sessions instant), registers it on the
pooled worker, stages the arguments with tags derived from the signature (``IN`` → ``INPUT``,
``OUT`` → ``OUTPUT_EXISTING``, ``INOUT`` → ``INOUT``), runs, and compares every ``OUT`` and
``INOUT`` tensor with the golden one by NumPy's ``allclose`` rule, computed by the native
toolchain (``RTOL`` = ``ATOL`` = 1e-5, or the case's ``rtol``/``atol``; NaN matches NaN).
``--rounds N`` runs each case N times, restoring the written tensors before each round and
checking every round.

A case is a dict: ``name`` (required), ``params`` (passed to ``generate_args`` and
``compute_golden``), ``platforms`` (default all), ``config`` (``CallConfig`` fields),
``rtol``/``atol``, ``skip_golden``, ``manual`` (run only when selected by ``--case``).

**Runtimes.** ``@scene_test(runtime=...)`` (or ``RUNTIME``) names the runtime variant of the
pooled worker the cases run on; a sequence of names (``RUNTIMES``) runs every case under each
of them, as one test per case and runtime (``vector_add_1m-host_build_graph``), and the
plugin's ``--runtime NAME`` keeps only that runtime's tests.

**Level 3.** ``@scene_test(level=3)`` (or ``LEVEL = 3``) runs a case on a level-3 worker of
``DEVICE_COUNT`` chips with a Python orchestration; ``CALLABLE`` then names it and the
callables it submits, and every tensor is compared. ``scene_l3.py`` describes that form.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _native
from ..callable import ChipCallable, CoreCallable, resolve_example_from
from ..compiler import KernelCompiler
from ..config import CallConfig, RuntimeEnv
from ..errors import InvalidConfigError
from ..options import RUNTIMES
from ..tensor import TaskArgs, as_array
from ..types import ArgSpec, TensorArgType
from .scene_l3 import L3_CONFIG_KEYS, build_level3, level3_options, run_level3, shared_copies

__all__ = [
    "SceneTestCase",
    "scene_test",
    "TensorArg",
    "Scalar",
    "TaskArgsBuilder",
    "CASE_KEYS",
    "scene_runtimes",
]

CASE_KEYS = {"name", "params", "platforms", "config", "rtol", "atol", "skip_golden", "manual"}
CONFIG_KEYS = {"aicpu_thread_num", "runtime_env", "runtime"}
LEVELS = (2, 3)
RUNTIME_ENV_KEYS = {"ring_task_window", "ring_heap", "ring_dep_pool", "ready_queue"}
PLATFORM_ALIASES = {"a2a3sim": "sim"}


class TensorArg:
    """A named tensor argument (any host tensor: numpy array, torch tensor, buffer object)."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value

    def __repr__(self) -> str:
        shape = getattr(self.value, "shape", "?")
        return f"TensorArg({self.name!r}, shape={tuple(shape) if shape != '?' else shape})"


class Scalar:
    """A named scalar argument (int, float, numpy scalar or ctypes value)."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value

    def __repr__(self) -> str:
        return f"Scalar({self.name!r}, {self.value!r})"


def _clone(value: Any) -> Any:
    if hasattr(value, "clone") and callable(value.clone):  # torch
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    return np.array(as_array(value), copy=True)


class TaskArgsBuilder:
    """The arguments of a scene case: tensors first, then scalars, with unique names; each is
    readable as an attribute (``args.a`` is the tensor or value named ``a``)."""

    def __init__(self, *items: Any) -> None:
        seen_scalar = False
        names = set()
        for item in items:
            if not isinstance(item, (TensorArg, Scalar)):
                raise TypeError(f"TaskArgsBuilder takes TensorArg and Scalar items, got {item!r}")
            if item.name in names:
                raise ValueError(f"argument name {item.name!r} appears twice")
            names.add(item.name)
            if isinstance(item, Scalar):
                seen_scalar = True
            elif seen_scalar:
                raise ValueError(f"tensor {item.name!r} comes after a scalar; tensors go first")
        self.items: Tuple[Any, ...] = tuple(items)

    @property
    def tensors(self) -> List[TensorArg]:
        return [i for i in self.items if isinstance(i, TensorArg)]

    @property
    def scalars(self) -> List[Scalar]:
        return [i for i in self.items if isinstance(i, Scalar)]

    def __getattr__(self, name: str) -> Any:
        for item in self.__dict__.get("items", ()):
            if item.name == name:
                return item.value
        raise AttributeError(name)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            return self.items[key].value
        return getattr(self, key)

    def __len__(self) -> int:
        return len(self.items)

    def with_tensors(self, values: Sequence[Any]) -> "TaskArgsBuilder":
        """The same arguments with the tensors' values replaced, in order, by ``values``."""
        if len(values) != len(self.tensors):
            raise ValueError(f"{len(values)} tensor values for {len(self.tensors)} tensors")
        it = iter(values)
        return TaskArgsBuilder(
            *(TensorArg(i.name, next(it)) if isinstance(i, TensorArg) else i for i in self.items)
        )

    def clone(self) -> "TaskArgsBuilder":
        """A deep copy: tensors copied, scalars shared."""
        return TaskArgsBuilder(
            *(
                TensorArg(i.name, _clone(i.value))
                if isinstance(i, TensorArg)
                else Scalar(i.name, i.value)
                for i in self.items
            )
        )


def scene_runtimes(cls: type) -> Tuple[str, ...]:
    """The runtime variants a scene class runs its cases under: ``RUNTIMES`` when given,
    else ``(RUNTIME,)``."""
    names = tuple(getattr(cls, "RUNTIMES", ()) or ())
    return names or (getattr(cls, "RUNTIME", RUNTIMES[0]),)


def _validate_cases(cls: type) -> None:
    level = getattr(cls, "LEVEL", 2)
    if level not in LEVELS:
        raise InvalidConfigError(
            f"{cls.__name__}: LEVEL must be 2 (one chip) or 3 (several chips), got {level!r}"
        )
    for name in scene_runtimes(cls):
        if name not in RUNTIMES:
            raise InvalidConfigError(
                f"{cls.__name__}: runtime {name!r} is not one of {', '.join(RUNTIMES)}"
            )
    config_keys = CONFIG_KEYS | (L3_CONFIG_KEYS if level == 3 else set())
    cases = getattr(cls, "CASES", None)
    if not isinstance(cases, (list, tuple)):
        raise InvalidConfigError(f"{cls.__name__}.CASES must be a list of dicts")
    names = set()
    for i, case in enumerate(cases):
        where = f"{cls.__name__}.CASES[{i}]"
        if not isinstance(case, dict):
            raise InvalidConfigError(f"{where} must be a dict, got {type(case).__name__}")
        unknown = set(case) - CASE_KEYS
        if unknown:
            raise InvalidConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
        name = case.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidConfigError(f"{where}: a case needs a non-empty 'name'")
        if name in names:
            raise InvalidConfigError(f"{where}: case name {name!r} appears twice")
        names.add(name)
        config = case.get("config", {})
        if not isinstance(config, dict):
            raise InvalidConfigError(f"{where}: config must be a dict, got {config!r}")
        if set(config) - config_keys:
            extra = sorted(set(config) - config_keys)
            hint = (
                f" ({', '.join(sorted(set(extra) & L3_CONFIG_KEYS))}: level-3 options)"
                if set(extra) & L3_CONFIG_KEYS
                else ""
            )
            raise InvalidConfigError(f"{where}: unknown config key(s) {extra}{hint}")
        env = config.get("runtime_env", {})
        if not isinstance(env, dict) or set(env) - RUNTIME_ENV_KEYS:
            raise InvalidConfigError(f"{where}: runtime_env takes {sorted(RUNTIME_ENV_KEYS)}")
        case_config(case).validate()
        if level == 3:
            level3_options(cls, case)


def case_config(case: Dict[str, Any]) -> CallConfig:
    """The :class:`CallConfig` of a case's ``config`` dict (the level-3 worker options,
    ``device_count``, ``num_sub_workers`` and ``chip_isolation``, are not part of it)."""
    config = {k: v for k, v in case.get("config", {}).items() if k not in L3_CONFIG_KEYS}
    env = RuntimeEnv(**config.pop("runtime_env", {}))
    return CallConfig(runtime_env=env, **config)


def build_chip_callable(cls: type, spec: Dict[str, Any], compiler: KernelCompiler) -> ChipCallable:
    """A chip callable from ``{"orchestration": {source, signature, [function_name],
    [extra_include_dirs]}, "incores": [{func_id, source, core_type, ...}], [name]}``, its
    source paths relative to the file defining ``cls``."""
    base = cls.source_dir()  # type: ignore[attr-defined]
    orch = spec["orchestration"]
    children = []
    for k in spec.get("incores", []):
        includes = [base / d for d in k.get("extra_include_dirs", [])]
        image = compiler.compile_incore(
            base / k["source"], core_type=k.get("core_type", "aiv"), extra_include_dirs=includes
        )
        children.append(
            (
                k["func_id"],
                CoreCallable(
                    image,
                    core_type=k.get("core_type", "aiv"),
                    signature=k.get("signature", ()),
                    entry=k.get("entry", "kernel_entry"),
                ),
            )
        )
    includes = [base / d for d in orch.get("extra_include_dirs", [])]
    image = compiler.compile_orchestration(
        scene_runtimes(cls)[0],  # one library serves every runtime
        base / orch["source"],
        extra_include_dirs=includes,
    )
    return ChipCallable.build(
        orch["signature"],
        orch.get("function_name", "aicpu_orchestration_entry"),
        image,
        children,
        name=spec.get("name", cls.__name__),
    )


def scene_test(
    level: int = 2, runtime: Union[str, Sequence[str]] = "tensormap_and_ringbuffer"
):
    """Class decorator: records the level (2: one chip; 3: several chips and sub workers, a
    Python orchestration) and the runtime — a name, or a sequence of names to run every case
    under each (``RUNTIMES``) — and validates ``CASES`` at once (unknown keys and runtimes
    raise ``ValueError`` when the module is imported)."""
    names = (runtime,) if isinstance(runtime, str) else tuple(runtime)
    if not names:
        raise InvalidConfigError("scene_test: runtime names no runtime")

    def wrap(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, SceneTestCase)):
            raise TypeError("@scene_test decorates SceneTestCase subclasses")
        if level not in LEVELS:
            raise InvalidConfigError(
                f"{cls.__name__}: scene tests are of level 2 or 3, got level={level!r}"
            )
        cls.LEVEL = level
        cls.RUNTIME = names[0]
        cls.RUNTIMES = names
        _validate_cases(cls)
        return cls

    return wrap


class SceneTestCase:
    """Base class of scene tests; see the module docs."""

    CALLABLE: Any = None
    CASES: Sequence[Dict[str, Any]] = ()
    RTOL = 1e-5
    ATOL = 1e-5
    LEVEL = 2
    RUNTIME = "tensormap_and_ringbuffer"
    """The runtime variant of the pooled worker the cases run on."""
    RUNTIMES: Sequence[str] = ()
    """Several runtime variants: every case runs under each (empty: ``RUNTIME`` alone)."""
    DEVICE_COUNT = 1
    """Level 3: the worker's chips (device ids from ``--device`` on)."""
    NUM_SUB_WORKERS: Optional[int] = None
    """Level 3: sub worker processes; None: 1 when ``CALLABLE`` names a sub callable, else 0."""
    CHIP_ISOLATION = "thread"
    """Level 3: ``"thread"`` (chips in this process) or ``"process"`` (a child each)."""

    _callables: Dict[type, ChipCallable] = {}
    _level3_callables: Dict[type, Dict[str, Any]] = {}

    # -- what a test defines -------------------------------------------------------------------

    def generate_args(self, params: Dict[str, Any]) -> TaskArgsBuilder:
        raise NotImplementedError(f"{type(self).__name__}.generate_args")

    def compute_golden(self, args: TaskArgsBuilder, params: Dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__}.compute_golden")

    # -- the framework ---------------------------------------------------------------------------

    @classmethod
    def source_dir(cls) -> Path:
        return Path(inspect.getfile(cls)).resolve().parent

    @classmethod
    def build_callable(cls, compiler: Optional[KernelCompiler] = None) -> ChipCallable:
        """Compiles ``CALLABLE`` (once per class and process); level 2."""
        cached = SceneTestCase._callables.get(cls)
        if cached is not None:
            return cached
        if cls.LEVEL != 2:
            raise InvalidConfigError(
                f"{cls.__name__} is a level-{cls.LEVEL} scene test: its callables are "
                "build_callables()"
            )
        spec = cls.CALLABLE
        kc = compiler or KernelCompiler()
        if isinstance(spec, ChipCallable):
            built = spec
        elif isinstance(spec, (str, os.PathLike)) or (isinstance(spec, dict) and "example" in spec):
            path = spec["example"] if isinstance(spec, dict) else spec
            built = ChipCallable.from_example(resolve_example_from(cls.source_dir(), path), kc)
        elif isinstance(spec, dict):
            built = build_chip_callable(cls, spec, kc)
        else:
            raise InvalidConfigError(
                f"{cls.__name__}.CALLABLE must be a dict, an example folder or a ChipCallable"
            )
        SceneTestCase._callables[cls] = built
        return built

    @classmethod
    def build_callables(cls, compiler: Optional[KernelCompiler] = None) -> Dict[str, Any]:
        """Level 3: each callable of ``CALLABLE['callables']`` by name — a compiled
        :class:`ChipCallable` or a sub callable's function (compiled once per class and
        process)."""
        cached = SceneTestCase._level3_callables.get(cls)
        if cached is None:
            cached = build_level3(cls, compiler or KernelCompiler(), build_chip_callable)
            SceneTestCase._level3_callables[cls] = cached
        return cached

    def signature(self) -> Tuple[ArgSpec, ...]:
        return self.build_callable().signature

    def compare_outputs(
        self, actual: TaskArgsBuilder, golden: TaskArgsBuilder, case: Dict[str, Any]
    ) -> None:
        """Compares every OUT/INOUT tensor with the golden one by the native ``allclose``
        (NumPy's semantics, ``equal_nan=True``, in float64); raises ``AssertionError`` naming
        the tensor, the mismatch count and the worst element."""
        tensor_specs = [s for s in self.signature() if s.direction.is_tensor]
        for spec, got_arg, want_arg in zip(tensor_specs, actual.tensors, golden.tensors):
            if spec.direction.copies_back:
                self._assert_close(got_arg, want_arg, case)

    def compare_tensors(
        self, actual: TaskArgsBuilder, golden: TaskArgsBuilder, case: Dict[str, Any]
    ) -> None:
        """Level 3: compares every tensor with the golden one (no signature says which are
        written, so the inputs are compared too), as :meth:`compare_outputs` does."""
        for got_arg, want_arg in zip(actual.tensors, golden.tensors):
            self._assert_close(got_arg, want_arg, case)

    def _assert_close(self, got_arg: TensorArg, want_arg: TensorArg, case: Dict[str, Any]) -> None:
        rtol = case.get("rtol", self.RTOL)
        atol = case.get("atol", self.ATOL)
        got = np.ascontiguousarray(as_array(got_arg.value), dtype=np.float64)
        want = np.ascontiguousarray(as_array(want_arg.value), dtype=np.float64)
        if got.shape != want.shape:
            raise AssertionError(f"{got_arg.name}: shape {got.shape} != golden {want.shape}")
        _, bad, _, _, worst = _native.allclose(
            got.tobytes(), want.tobytes(), "f64", float(rtol), float(atol), True
        )
        if bad == 0:
            return
        index, got_value, want_value = worst
        at = tuple(int(i) for i in np.unravel_index(index, got.shape))
        raise AssertionError(
            f"{got_arg.name}: {bad} of {got.size} elements differ from the golden result "
            f"(rtol={rtol}, atol={atol}); worst at {at}: "
            f"got {got_value!r}, expected {want_value!r}"
        )

    def run_case(
        self, worker: Any, case: Dict[str, Any], rounds: int = 1, trace: Optional[str] = None
    ) -> None:
        """Runs one case on ``worker`` ``rounds`` times and checks each round (a level-3 case
        on a level-3 worker, see ``scene_l3.py``). ``trace``: a level-2 case's runs are
        traced and the last round's trace is written to this path."""
        params = case.get("params", {})
        level3 = self.build_callables() if self.LEVEL == 3 else None
        callable = self.build_callable() if level3 is None else None
        args = self.generate_args(params)
        if not isinstance(args, TaskArgsBuilder):
            raise TypeError(f"{type(self).__name__}.generate_args must return a TaskArgsBuilder")
        golden = None
        if not case.get("skip_golden", False):
            golden = args.clone()
            self.compute_golden(golden, params)
        config = case_config(case)
        if level3 is not None:
            shared = args.with_tensors(shared_copies(worker, [t.value for t in args.tensors]))

            def check() -> None:
                if golden is not None:
                    self.compare_tensors(shared, golden, case)

            run_level3(
                worker, self.CALLABLE["orchestration"], level3, shared, config, rounds, check
            )
            return
        assert callable is not None
        sig = callable.signature
        tensor_specs = [s for s in sig if s.direction.is_tensor]
        written = [
            (t, _clone(t.value))
            for spec, t in zip(tensor_specs, args.tensors)
            if spec.direction.copies_back
        ]
        handle = worker.register(callable)
        try:
            for round_index in range(rounds):
                if round_index:
                    for t, initial in written:
                        as_array(t.value, writable=True)[...] = as_array(initial)
                task_args = TaskArgs()
                for spec, t in zip(tensor_specs, args.tensors):
                    task_args.add_tensor(
                        worker.make_tensor_arg(t.value), TensorArgType.for_direction(spec.direction)
                    )
                for s in args.scalars:
                    task_args.add_scalar(s.value)
                if trace is None:
                    worker.run(handle, task_args, config)
                else:
                    worker.run(handle, task_args, config, trace=trace)
                if golden is not None:
                    self.compare_outputs(args, golden, case)
        finally:
            worker.unregister(handle)

    def test_scene(
        self,
        scene_case: Dict[str, Any],
        st_worker: Any,
        scene_rounds: int,
        scene_trace: Optional[str],
    ) -> None:
        """The pytest entry point (parametrized by the simpler pytest plugin)."""
        self.run_case(st_worker, scene_case, rounds=scene_rounds, trace=scene_trace)

    @classmethod
    def run_module(cls, module_name: str, argv: Optional[Iterable[str]] = None) -> int:
        """Runs the scene tests of a module with pytest (``python test_x.py -p sim``):
        ``-p/--platform``, ``-d/--device``, ``--rounds N``, ``--case NAME``."""
        import pytest

        module = sys.modules[module_name]
        args = list(sys.argv[1:] if argv is None else argv)
        # simpler is imported already, so pytest cannot rewrite the plugin's asserts: fine.
        translated: List[str] = [
            str(Path(module.__file__).resolve()),
            "-W",
            "ignore::pytest.PytestAssertRewriteWarning",
        ]
        it = iter(args)
        for a in it:
            if a in ("-p", "--platform"):
                translated += ["--platform", next(it)]
            elif a in ("-d", "--device"):
                translated += ["--device", next(it)]
            else:
                translated.append(a)
        return int(pytest.main(translated))


def normalize_platform(name: str) -> str:
    return PLATFORM_ALIASES.get(name, name)
