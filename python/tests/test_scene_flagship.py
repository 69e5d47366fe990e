"""The flagship workloads as scene tests: paged-attention decode (examples/paged_attention)
and one decoder layer at decode time (examples/decoder_layer). Inputs and the float64
references come from each example's data module, which never calls simpler. Also: paged
attention on f16 and bf16 inputs, bf16 bits passed from a uint16 array, and the runtime's
task count (``RunReport.tasks``) against each example's formula.

Run alone with ``scripts/test-python.sh python/tests/test_scene_flagship.py``.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from simpler.testing import Scalar, SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES / "paged_attention"))
sys.path.insert(0, str(EXAMPLES / "decoder_layer"))

import dl_data  # noqa: E402
import pa_data  # noqa: E402


def _load(name, path):
    """A module from a file (both examples have a run.py, so neither is imported by name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pa_run = _load("paged_attention_run", EXAMPLES / "paged_attention" / "run.py")


@scene_test(level=2, runtime="tensormap_and_ringbuffer")
class TestPagedAttention(SceneTestCase):
    """Grouped-query decode attention over a shuffled paged KV cache (NaN in every slot no
    sequence owns): 4 tasks per KV block and one per (sequence, KV head)."""

    CALLABLE = {"example": "../../examples/paged_attention"}
    CASES = [
        {
            "name": "pa_gqa_ragged",
            "params": dict(batch=3, heads=4, kv_heads=2, head_dim=16, block_size=8,
                           max_context=45, seed=1),
            **pa_data.TOLERANCE["f32"],
        },
        {
            "name": "pa_one_token_blocks",
            "params": dict(batch=2, heads=2, kv_heads=1, head_dim=4, block_size=1,
                           max_context=6, seed=2),
            **pa_data.TOLERANCE["f32"],
        },
        {
            "name": "pa_mha_single_block",
            "params": dict(batch=2, heads=3, kv_heads=3, head_dim=8, block_size=32,
                           max_context=20, seed=3),
            **pa_data.TOLERANCE["f32"],
        },
    ]

    def generate_args(self, params):
        x = pa_data.make_inputs(**params)
        return TaskArgsBuilder(
            TensorArg("q", x.q),
            TensorArg("k_cache", x.k_cache),
            TensorArg("v_cache", x.v_cache),
            TensorArg("block_table", x.block_table),
            TensorArg("context_lens", x.context_lens),
            TensorArg("out", x.out()),
        )

    def compute_golden(self, args, params):
        x = pa_data.PagedInputs(
            args.q, args.k_cache, args.v_cache, args.block_table, args.context_lens, "f32"
        )
        args.out[:] = pa_data.reference(x)


SMALL_MODEL = dict(embed=64, heads=4, kv_heads=2, head_dim=16, ffn=96)


@scene_test(level=2, runtime="tensormap_and_ringbuffer")
class TestDecoderLayer(SceneTestCase):
    """One decode step of a pre-norm decoder layer; out and both caches (the new tokens'
    slots, NaN before the run) are compared with the float64 reference."""

    CALLABLE = {"example": "../../examples/decoder_layer"}
    CASES = [
        {
            "name": "decoder_ragged",
            "params": dict(batch=10, context=40, seed=4, block_size=8, ragged=True, **SMALL_MODEL),
            **dl_data.TOLERANCE,
        },
        {
            "name": "decoder_first_token",
            "params": dict(batch=2, context=1, seed=5, block_size=4, **SMALL_MODEL),
            **dl_data.TOLERANCE,
        },
        {
            "name": "decoder_default_model",
            "params": dict(batch=3, context=33, seed=6),
            **dl_data.TOLERANCE,
        },
    ]

    def generate_args(self, params):
        x = dl_data.make_inputs(**params)
        tensors = [TensorArg(n, getattr(x, n)) for n in dl_data.LayerInputs.NAMES]
        return TaskArgsBuilder(*tensors, Scalar("eps", np.float32(x.eps)))

    def compute_golden(self, args, params):
        names = dl_data.LayerInputs.NAMES
        x = dl_data.LayerInputs(*(getattr(args, n) for n in names), eps=args.eps)
        want = dl_data.reference(x)
        for name in ("out", "k_cache", "v_cache"):
            getattr(args, name)[...] = want[name]


def test_paged_attention_takes_f16_and_bf16_inputs():
    """q, k_cache and v_cache in f16, and in bf16 as raw uint16 bits passed with
    ``Tensor.from_host(bits, dtype="bf16")``; f32 accumulation matches the float64 reference
    of the same (widened) values."""
    from simpler import Tensor, Worker

    for dtype in ("f16", "bf16"):
        x = pa_data.make_inputs(3, 4, 2, 16, 8, 30, seed=7, dtype=dtype)
        want = pa_data.reference(x)
        out = x.out()
        staged = [pa_run.stage(t, dtype) for t in (x.q, x.k_cache, x.v_cache)]
        if dtype == "bf16":
            assert all(isinstance(t, Tensor) and t.dtype.short_name == "bf16" for t in staged)
        with Worker(level=2, platform="sim") as w:
            h = w.register(pa_run.build_callable(dtype))
            w.init()
            w.run(h, staged + [x.block_table, x.context_lens, out])
        assert pa_run.check(out, want, **pa_data.TOLERANCE[dtype]), dtype


def test_run_reports_the_predicted_task_count():
    """The runtime's count of submitted tasks (RunReport.tasks) equals the examples' own
    formulas (4 per KV block + 1 per sequence and KV head; plus the dense ops of the layer
    and its allocation-only task)."""
    from simpler import ChipCallable, Worker

    x = pa_data.make_inputs(3, 4, 2, 8, 4, 19, seed=8)
    layer = dl_data.make_inputs(5, 23, seed=9, block_size=4, ragged=True, **SMALL_MODEL)
    with Worker(level=2, platform="sim") as w:
        hp = w.register(ChipCallable.from_example(EXAMPLES / "paged_attention"))
        hl = w.register(ChipCallable.from_example(EXAMPLES / "decoder_layer"))
        w.init()
        args = [x.q, x.k_cache, x.v_cache, x.block_table, x.context_lens, x.out()]
        report = w.run(hp, args)
        assert report.tasks == pa_data.task_count(x.context_lens, 2, 4)
        assert w.run(hl, layer.args()).tasks == dl_data.task_count(layer)


def test_bf16_tensor_needs_uint16_bits():
    """Only a uint16 array is taken as bf16 bits; any other dtype is still a mismatch."""
    from simpler import InvalidArgumentError, Tensor

    assert Tensor.from_host(np.zeros(4, np.uint16), dtype="bf16").dtype.short_name == "bf16"
    assert Tensor.from_host(np.zeros(4, np.uint16)).dtype.short_name == "u16"
    with pytest.raises(InvalidArgumentError, match="int16"):
        Tensor.from_host(np.zeros(4, np.int16), dtype="bf16")


if __name__ == "__main__":
    raise SystemExit(SceneTestCase.run_module(__name__))


dl_run = _load("decoder_layer_run", EXAMPLES / "decoder_layer" / "run.py")


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--batch", "0"], "--batch must be at least 1"),
        (["--ffn", "0"], "--ffn must be at least 1"),
        (["--context", "-3"], "--context must be at least 1"),
        (["--kv-heads", "3"], "--heads (8) must be a multiple of --kv-heads (3)"),
        # Sizes whose tensors would not fit: refused before anything is allocated.
        (["--context", "100000000"], "largest: k_cache"),
        (["--context", "100000000"], "lower --batch, --context, --block-size, --kv-heads or --head-dim"),
        (["--ffn", "10000000"], "largest: w_gate_up"),
        (["--batch", "100000000", "--context", "1"], "more than the 1 GiB this script"),
    ],
)
def test_decoder_layer_run_refuses_bad_sizes_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        dl_run.main(argv)
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err


def test_decoder_layer_tensor_bytes_are_what_make_inputs_allocates():
    want = dl_data.tensor_bytes(3, 37, 8, **SMALL_MODEL)
    x = dl_data.make_inputs(3, 37, 0, 8, False, **SMALL_MODEL)
    assert {n: getattr(x, n).nbytes for n in x.NAMES} == want
    ragged = dl_data.make_inputs(3, 37, 0, 8, True, **SMALL_MODEL)
    assert all(getattr(ragged, n).nbytes <= want[n] for n in x.NAMES)
    assert dl_data.too_large(want) is None
    assert "lower" in dl_data.too_large(want, limit=sum(want.values()) - 1)
