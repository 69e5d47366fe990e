"""The flagship workloads as scene tests: paged-attention decode (examples/paged_attention)
and one decoder layer at decode time (examples/decoder_layer). Inputs and the float64
references come from each example's data module, which never calls simpler.

Run alone with ``scripts/test-python.sh python/tests/test_scene_flagship.py``.
"""

import sys
from pathlib import Path

from simpler.testing import SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES / "paged_attention"))

import pa_data  # noqa: E402


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


if __name__ == "__main__":
    raise SystemExit(SceneTestCase.run_module(__name__))
