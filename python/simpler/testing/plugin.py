"""The simpler pytest plugin (registered through the ``pytest11`` entry point).

Options:

``--platform NAME``
    Run the cases listed for this platform (default ``sim``; ``a2a3sim`` is an alias).
``--rounds N``
    Run each case N times (written tensors restored between rounds, each round checked).
``--case SELECTOR``
    Run only selected cases (repeatable): ``NAME`` (a case of any class), ``Class::NAME``, or
    ``Class::`` (every case of a class). Selecting a ``manual`` case runs it.
``--device ID``
    Device id of the pooled worker (default 0); a level-3 case's chips are the device ids
    from it on.
``--runtime NAME``
    Run only the tests of this runtime variant (repeatable): a class's cases run under each
    of its ``RUNTIMES`` (``@scene_test(runtime=(...))``), a test per case and runtime whose
    id is ``<case>-<runtime>``; a class of one runtime keeps the case name as its id.
``--trace-dir DIR``
    Record every level-2 case at trace level ``tasks`` and write its trace (Perfetto) to
    ``DIR/<Class>.<test id>.perfetto-trace`` (the case's name, and its runtime for a class
    of several), one file per test (the last round's);
    ``simpler trace summary|svg`` read them (``docs/tracing.md``). Level-3 cases are not
    traced. (pytest's own ``--trace`` starts the debugger, hence the name.)

Every ``SceneTestCase`` subclass gets one test per selected case and runtime. Workers are
pooled for the whole session: one level-2 worker per (platform, runtime, device), and one
level-3 worker per (platform, runtime, device, chip count, sub worker count, chip isolation);
the runtime is the worker's ``runtime`` option.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Tuple

import pytest

from ..options import PLATFORMS, RUNTIMES
from ..worker import Worker
from .scene import SceneTestCase, _validate_cases, normalize_platform, scene_runtimes
from .scene_l3 import device_ids, level3_options


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("simpler", "simpler scene tests")
    group.addoption(
        "--platform", default="sim", help="platform to run scene cases on (default: sim)"
    )
    group.addoption("--rounds", type=int, default=1, help="run each scene case N times")
    group.addoption(
        "--case",
        action="append",
        default=[],
        help="select scene cases: NAME, Class::NAME or Class:: (repeatable)",
    )
    group.addoption("--device", type=int, default=0, help="device id of the pooled worker")
    group.addoption(
        "--runtime",
        dest="simpler_runtime",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only the scene tests of this runtime (repeatable): {', '.join(RUNTIMES)}",
    )
    group.addoption(
        "--trace-dir",
        dest="simpler_trace_dir",
        default=None,
        metavar="DIR",
        help="write each level-2 case's trace to DIR/<Class>.<case>.perfetto-trace",
    )


def pytest_configure(config: Any) -> None:
    if config.getoption("rounds") < 1:
        raise pytest.UsageError("--rounds must be at least 1")
    trace_dir = config.getoption("simpler_trace_dir")
    if trace_dir is not None:
        os.makedirs(trace_dir, exist_ok=True)
    platform = config.getoption("platform")
    if normalize_platform(platform) not in PLATFORMS:
        raise pytest.UsageError(f"--platform {platform}: only {', '.join(PLATFORMS)} are available")
    for runtime in config.getoption("simpler_runtime"):
        if runtime not in RUNTIMES:
            raise pytest.UsageError(f"--runtime {runtime}: the runtimes are {', '.join(RUNTIMES)}")


def _selected(cls: type, case: Dict[str, Any], selectors: List[str]) -> Tuple[bool, bool]:
    """(selected, explicitly named) for a case under the --case selectors."""
    if not selectors:
        return True, False
    for sel in selectors:
        cls_part, sep, name_part = sel.partition("::")
        if not sep:
            if sel == case["name"]:
                return True, True
        elif cls_part == cls.__name__ and (name_part in ("", case["name"])):
            return True, bool(name_part)
    return False, False


def pytest_generate_tests(metafunc: Any) -> None:
    cls = metafunc.cls
    if (
        cls is None
        or not issubclass(cls, SceneTestCase)
        or "scene_case" not in metafunc.fixturenames
    ):
        return
    _validate_cases(cls)
    config = metafunc.config
    platform = normalize_platform(config.getoption("platform"))
    selectors = config.getoption("case")
    runtimes = scene_runtimes(cls)
    wanted = config.getoption("simpler_runtime") or runtimes
    # Each case runs under each runtime when the worker's fixture takes the runtime.
    per_runtime = "scene_runtime" in metafunc.fixturenames
    params = []
    for case in cls.CASES:
        platforms = [normalize_platform(p) for p in case.get("platforms", [platform])]
        if platform not in platforms:
            continue
        selected, named = _selected(cls, case, selectors)
        if not selected:
            continue
        manual = case.get("manual", False)
        if isinstance(manual, (list, tuple)):
            manual = platform in [normalize_platform(p) for p in manual]
        marks = (
            []
            if (named or not manual)
            else [pytest.mark.skip(reason="manual case: select it with --case")]
        )
        if not per_runtime:
            params.append(pytest.param(case, id=case["name"], marks=marks))
            continue
        for runtime in runtimes:
            if runtime not in wanted:
                continue
            name = case["name"] if len(runtimes) == 1 else f"{case['name']}-{runtime}"
            params.append(pytest.param(case, runtime, id=name, marks=marks))
    metafunc.parametrize("scene_case,scene_runtime" if per_runtime else "scene_case", params)


@pytest.fixture
def scene_runtime(request: Any) -> str:
    """The runtime variant this scene test runs under (parametrized per case and runtime by
    the plugin; else the class's ``RUNTIME``)."""
    cls = request.cls
    return scene_runtimes(cls)[0] if cls is not None else RUNTIMES[0]


@pytest.fixture(scope="session")
def _simpler_worker_pool():
    pool: Dict[Tuple[Any, ...], Worker] = {}
    yield pool
    for worker in pool.values():
        worker.close()


@pytest.fixture
def st_worker(
    request: Any, _simpler_worker_pool: Dict[Tuple[Any, ...], Worker], scene_runtime: str
) -> Worker:
    """The pooled worker for this test's platform, runtime and device: level 2, or for a
    level-3 case the level-3 worker of its chip count, sub workers and chip isolation."""
    cls = request.cls
    runtime = scene_runtime
    platform = normalize_platform(request.config.getoption("platform"))
    device = request.config.getoption("device")
    if getattr(cls, "LEVEL", 2) == 3:
        count, subs, isolation = level3_options(cls, request.node.callspec.params["scene_case"])
        key: Tuple[Any, ...] = (platform, runtime, device, count, subs, isolation)
    else:
        key = (platform, runtime, device)
    worker = _simpler_worker_pool.get(key)
    if worker is None or worker.closed:
        if len(key) == 3:
            worker = Worker(level=2, platform=platform, runtime=runtime, device_id=device)
        else:
            worker = Worker(
                level=3,
                platform=platform,
                runtime=runtime,
                device_ids=device_ids(device, count),
                num_sub_workers=subs,
                chip_isolation=isolation,
            )
        worker.init()
        _simpler_worker_pool[key] = worker
    return worker


@pytest.fixture
def scene_rounds(request: Any) -> int:
    """The --rounds option."""
    return int(request.config.getoption("rounds"))


@pytest.fixture
def scene_trace(request: Any) -> Optional[str]:
    """The trace file of this case under --trace-dir DIR, or None without it."""
    trace_dir = request.config.getoption("simpler_trace_dir")
    if trace_dir is None:
        return None
    case = request.node.callspec.id  # the case's name, and its runtime when it has several
    cls = request.cls.__name__ if request.cls is not None else "scene"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{cls}.{case}")
    return os.path.join(trace_dir, f"{name}.perfetto-trace")
