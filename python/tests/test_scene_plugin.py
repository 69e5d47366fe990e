"""The scene-test framework and its pytest plugin (--platform, --rounds, --case, --runtime)."""

import textwrap

import pytest
from conftest import KERNELS

SCENE = textwrap.dedent(
    """
    import numpy as np
    from simpler.testing import Scalar, SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

    COUNTER = {"runs": 0}

    @scene_test(level=2)
    class TestScale(SceneTestCase):
        CALLABLE = {
            "orchestration": {
                "source": "KERNELS/one_task_orch.c",
                "signature": [("x", "inout", "f32"), ("alpha", "scalar", "f32")],
            },
            "incores": [{"func_id": 0, "source": "KERNELS/scale.c", "core_type": "aiv"}],
        }
        CASES = [
            {"name": "double", "params": {"alpha": 2.0}},
            {"name": "half", "params": {"alpha": 0.5}, "platforms": ["sim"]},
            {"name": "elsewhere", "params": {"alpha": 3.0}, "platforms": ["a5sim"]},
            {"name": "by_hand", "params": {"alpha": 4.0}, "manual": True},
            {"name": "wrong_golden", "params": {"alpha": 2.0, "lie": True}},
            {"name": "loose", "params": {"alpha": 2.0, "lie": True, "off": 1e-3}, "atol": 1e-2},
        ]

        def generate_args(self, params):
            COUNTER["runs"] += 1
            return TaskArgsBuilder(
                TensorArg("x", np.arange(1, 9, dtype=np.float32)),
                Scalar("alpha", params["alpha"]),
            )

        def compute_golden(self, args, params):
            args.x[:] = args.x * params["alpha"]
            if params.get("lie"):
                args.x[3] += params.get("off", 1.0)
    """
).replace("KERNELS", str(KERNELS))


@pytest.fixture
def scene_file(pytester):
    pytester.makepyfile(test_scene_case=SCENE)
    return pytester


def test_cases_become_tests_filtered_by_platform(scene_file):
    result = scene_file.runpytest("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*test_scene[[]double[]] PASSED*",
            "*test_scene[[]by_hand[]] SKIPPED*manual*",
            "*test_scene[[]wrong_golden[]] FAILED*",
        ]
    )
    assert "elsewhere" not in result.stdout.str()


def test_a_golden_mismatch_names_the_tensor_and_element(scene_file):
    result = scene_file.runpytest("--case", "wrong_golden")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*x: 1 of 8 elements differ*worst at (3,)*got 8.0, expected 9.0*"])


def test_case_selection_forms(scene_file):
    scene_file.runpytest("--case", "TestScale::half").assert_outcomes(passed=1)
    scene_file.runpytest("--case", "by_hand").assert_outcomes(passed=1)
    scene_file.runpytest("--case", "double", "--case", "loose").assert_outcomes(passed=2)
    result = scene_file.runpytest("--case", "TestScale::")
    result.assert_outcomes(passed=3, failed=1, skipped=1)


def test_rounds_and_platform_options(scene_file):
    scene_file.runpytest("--case", "double", "--rounds", "3").assert_outcomes(passed=1)
    scene_file.runpytest("--case", "double", "--platform", "a2a3sim").assert_outcomes(passed=1)
    result = scene_file.runpytest("--platform", "a5sim")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--platform a5sim*only*sim*"])
    assert scene_file.runpytest("--rounds", "0").ret != 0


def test_unknown_case_keys_are_refused_at_import(pytester):
    pytester.makepyfile(
        test_bad=textwrap.dedent(
            """
            from simpler.testing import SceneTestCase, scene_test

            @scene_test(level=2)
            class TestBad(SceneTestCase):
                CASES = [{"name": "x", "colour": "red"}]
            """
        )
    )
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["*unknown key(s)*colour*"])
    assert result.ret != 0


def test_a_class_of_several_runtimes_runs_each_case_under_each(pytester):
    pytester.makepyfile(
        test_runtimes=SCENE.replace(
            "@scene_test(level=2)",
            '@scene_test(level=2, runtime=("tensormap_and_ringbuffer", "host_build_graph"))',
        )
        + textwrap.dedent(
            """
            def has_the_runtime(self, scene_case, st_worker, scene_runtime):
                assert st_worker.runtime == scene_runtime

            TestScale.test_the_pooled_worker_has_the_runtime = has_the_runtime
            """
        )
    )
    result = pytester.runpytest("-v", "-p", "no:cacheprovider", "--case", "double")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*test_scene[[]double-tensormap_and_ringbuffer[]] PASSED*",
            "*test_scene[[]double-host_build_graph[]] PASSED*",
        ]
    )
    result = pytester.runpytest("-v", "--case", "double", "--runtime", "host_build_graph")
    result.assert_outcomes(passed=2)
    assert "tensormap_and_ringbuffer]" not in result.stdout.str()
    result = pytester.runpytest("--runtime", "aicpu_build_graph")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--runtime aicpu_build_graph*host_build_graph*"])
    pytester.makepyfile(
        test_runtimes=SCENE.replace("@scene_test(level=2)", '@scene_test(runtime="hbg")')
    )
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["*runtime 'hbg' is not one of*"])
    assert result.ret != 0


SCENE_L3 = textwrap.dedent(
    """
    import numpy as np
    from simpler import TaskArgs, TensorArgType as T
    from simpler.testing import Scalar, SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

    SCALE = {
        "name": "scale",
        "orchestration": {
            "source": "KERNELS/one_task_orch.c",
            "signature": [("x", "inout", "f32"), ("alpha", "scalar", "f32")],
        },
        "incores": [{"func_id": 0, "source": "KERNELS/scale.c", "core_type": "aiv"}],
    }

    def scale_halves(orch, callables, args, config):
        n = args.x.shape[0] // 2
        for i in range(2):
            orch.submit_next_level(
                callables.scale,
                TaskArgs().add_tensor(args.x[i * n:(i + 1) * n], T.INOUT).add_scalar(args.alpha),
                config, worker=i,
            )
        if args.alpha == 5.0:  # writes an input the golden leaves alone
            orch.submit_next_level(
                callables["scale"], TaskArgs().add_tensor(args.y, T.INOUT).add_scalar(2.0),
                config, worker=0,
            )

    def add_one(args):
        args[0][...] += 1

    def scale_then_add_one(orch, callables, args, config):
        scale_halves(orch, callables, args, config)
        orch.submit_sub(callables.add_one, TaskArgs().add_tensor(args.x, T.INOUT))

    @scene_test(level=3)
    class TestScaleL3(SceneTestCase):
        DEVICE_COUNT = 2
        CALLABLE = {"orchestration": scale_halves, "callables": [SCALE]}
        CASES = [
            {"name": "double", "params": {"alpha": 2.0}},
            {"name": "wrong_golden", "params": {"alpha": 2.0, "lie": True}},
            {"name": "input_written", "params": {"alpha": 5.0}},
            {"name": "four_chips", "params": {"alpha": 3.0}, "config": {"device_count": 4}},
        ]

        def generate_args(self, params):
            return TaskArgsBuilder(
                TensorArg("x", np.arange(1, 9, dtype=np.float32)),
                TensorArg("y", np.ones(4, np.float32)),
                Scalar("alpha", params["alpha"]),
            )

        def compute_golden(self, args, params):
            args.x[:] = args.x * params["alpha"]
            if params.get("lie"):
                args.x[3] += 1.0

    class TestScaleAddOne(TestScaleL3):
        LEVEL = 3
        CALLABLE = {
            "orchestration": scale_then_add_one,
            "callables": [SCALE, {"name": "add_one", "callable": add_one}],
        }
        CASES = [{"name": "scale_add_one", "params": {"alpha": 0.5}}]

        def compute_golden(self, args, params):
            args.x[:] = args.x * params["alpha"] + 1
    """
).replace("KERNELS", str(KERNELS))


@pytest.fixture
def scene_l3_file(pytester):
    pytester.makepyfile(test_scene_l3_case=SCENE_L3)
    return pytester


def test_level3_cases_run_on_several_chips_and_compare_every_tensor(scene_l3_file):
    result = scene_l3_file.runpytest("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*TestScaleL3::test_scene[[]double[]] PASSED*",
            "*TestScaleL3::test_scene[[]wrong_golden[]] FAILED*",
            "*TestScaleL3::test_scene[[]input_written[]] FAILED*",
            "*TestScaleL3::test_scene[[]four_chips[]] PASSED*",
            "*TestScaleAddOne::test_scene[[]scale_add_one[]] PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(["*x: 1 of 8 elements differ*worst at (3,)*got 8.0, expected 9.0*"])
    result.stdout.fnmatch_lines(["*y: 4 of 4 elements differ*got 2.0, expected 1.0*"])


def test_level3_rounds_restore_every_tensor(scene_l3_file):
    # x is INOUT: without the restore, round 2 would compute 4x and fail.
    result = scene_l3_file.runpytest("--case", "double", "--case", "scale_add_one", "--rounds", "3")
    result.assert_outcomes(passed=2)


def test_level3_options_are_refused_at_level2_and_checked_at_level3(pytester):
    pytester.makepyfile(
        test_bad=textwrap.dedent(
            """
            from simpler.testing import SceneTestCase, scene_test

            @scene_test(level=2)
            class TestBad(SceneTestCase):
                CASES = [{"name": "x", "config": {"device_count": 2}}]
            """
        ),
        test_bad3=textwrap.dedent(
            """
            from simpler.testing import SceneTestCase, scene_test

            @scene_test(level=3)
            class TestBad3(SceneTestCase):
                CALLABLE = {"orchestration": print, "callables": []}
                CASES = [{"name": "x", "config": {"device_count": 0}}]
            """
        ),
        test_bad4=textwrap.dedent(
            """
            from simpler.testing import SceneTestCase, scene_test

            @scene_test(level=3)
            class TestBad4(SceneTestCase):
                CALLABLE = {"orchestration": {"source": "orch.c"}}
                CASES = [{"name": "x"}]
            """
        ),
        test_bad5=textwrap.dedent(
            """
            from simpler.testing import SceneTestCase, scene_test

            @scene_test(level=4)
            class TestBad5(SceneTestCase):
                CASES = []
            """
        ),
    )
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(
        ["*TestBad.CASES*unknown config key(s)*(device_count: level-3 options)"]
    )
    result.stdout.fnmatch_lines(["*device_count must be an int >= 1, got 0*"])
    result.stdout.fnmatch_lines(["*TestBad4.CALLABLE: a level-3 scene test's CALLABLE is a dict*"])
    result.stdout.fnmatch_lines(["*TestBad5: scene tests are of level 2 or 3, got level=4*"])
    assert result.ret != 0
