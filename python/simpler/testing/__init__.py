"""Scene tests for simpler callables (``SceneTestCase``) and their pytest plugin."""

from .scene import CASE_KEYS, Scalar, SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

__all__ = ["SceneTestCase", "scene_test", "TensorArg", "Scalar", "TaskArgsBuilder", "CASE_KEYS"]
