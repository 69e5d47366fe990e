"""The scene-test framework and its pytest plugin (--platform, --rounds, --case)."""

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
