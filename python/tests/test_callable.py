"""ChipCallable / CoreCallable: building, validation, bundles (ours and `simpler build`'s)."""

import numpy as np
import pytest
import simpler
from conftest import EXAMPLES, KERNELS, run_cli
from simpler import ArgDirection, ChipCallable, CoreCallable, Worker
from simpler.manifest import load_manifest


def test_build_exposes_what_it_was_built_from(vadd):
    assert vadd.name == "vector_add"
    assert [a.name for a in vadd.signature] == ["a", "b", "c"]
    assert vadd.signature[2].direction is ArgDirection.OUT
    assert vadd.func_name == "aicpu_orchestration_entry"
    assert vadd.binary[:4] == b"\x7fELF" and vadd.binary_size == len(vadd.binary)
    [(func_id, core)] = vadd.children
    assert func_id == 0 and core.core_type == "aiv" and core.entry == "kernel_entry"
    assert vadd.hashid.startswith("sha256:") and len(vadd.hashid) == 7 + 64


def test_equal_content_has_equal_hashid(vadd):
    again = ChipCallable.from_bytes(vadd.to_bytes())
    assert again.hashid == vadd.hashid


def test_malformed_callables_fail_where_they_are_built(vadd):
    core = vadd.children[0][1]
    orch = vadd.binary
    sig = [("a", "in", "f32")]
    with pytest.raises(simpler.InvalidCallableError, match="func_id 0"):
        ChipCallable.build(sig, binary=orch, children=[(0, core), (0, core)])
    with pytest.raises(simpler.InvalidCallableError, match="ELF"):
        ChipCallable.build(sig, binary=b"not a library", children=[(0, core)])
    with pytest.raises(simpler.SignatureError, match="twice"):
        ChipCallable.build(
            [("a", "in", "f32"), ("a", "out", "f32")], binary=orch, children=[(0, core)]
        )
    with pytest.raises(simpler.SignatureError, match="after a scalar"):
        ChipCallable.build(
            [("s", "scalar", "f32"), ("a", "in", "f32")], binary=orch, children=[(0, core)]
        )
    with pytest.raises(TypeError):
        ChipCallable.build(sig, binary=orch, children=[(0, "not a core")])
    with pytest.raises(TypeError):
        CoreCallable(b"\x7fELF", core_type="gpu")
    with pytest.raises(NotImplementedError):
        ChipCallable.build(sig, binary=orch, children=[(0, core)], config_name="cfg")


def test_save_and_load_bundle_round_trip(vadd, tmp_path):
    path = tmp_path / "vadd.simpler"
    vadd.save(path)
    loaded = ChipCallable.from_bundle(path)
    assert loaded.hashid == vadd.hashid and loaded.signature == vadd.signature


def test_bundle_errors(tmp_path):
    with pytest.raises(simpler.BundleIOError) as info:
        ChipCallable.from_bundle(tmp_path / "missing.simpler")
    assert isinstance(info.value, OSError) and info.value.cause
    bad = tmp_path / "bad.simpler"
    bad.write_bytes(b"NOTABUNDLE" + bytes(32))
    with pytest.raises(simpler.BundleError, match="not a simpler bundle"):
        ChipCallable.from_bundle(bad)


def test_loads_a_bundle_built_by_the_cli(tmp_path, rng):
    out = tmp_path / "vector_add.simpler"
    run_cli("build", EXAMPLES / "vector_add", "-o", out)
    callable = ChipCallable.from_bundle(out)
    assert callable.name == "vector_add"
    n = callable.signature[0].shape[0]
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    with Worker(level=2, platform="sim") as w:
        w.init()
        w.run(w.register(callable), [a, b, c])
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


def test_from_example_compiles_the_manifest(compiler):
    callable = ChipCallable.from_example(EXAMPLES / "formula", compiler)
    assert callable.name == "formula"
    assert sorted(f for f, _ in callable.children) == [0, 1, 2]
    assert callable.signature[0].shape == (16384,)


def test_from_example_reports_manifest_errors(tmp_path, compiler):
    (tmp_path / "simpler.toml").write_text(
        'name = "x"\n[orchestration]\nsource = "o.c"\nbogus = 1\n'
    )
    with pytest.raises(simpler.InvalidCallableError, match="bogus"):
        ChipCallable.from_example(tmp_path, compiler)
    (tmp_path / "simpler.toml").write_text('name = "x"\n[orchestration]\nsource = "o.c"\n')
    with pytest.raises(simpler.InvalidCallableError, match="does not exist"):
        ChipCallable.from_example(tmp_path, compiler)
    (tmp_path / "simpler.toml").write_text('name = "x\n')
    with pytest.raises(simpler.InvalidCallableError, match="line 1"):
        ChipCallable.from_example(tmp_path, compiler)
    with pytest.raises(simpler.InvalidCallableError, match="no manifest"):
        ChipCallable.from_example(tmp_path / "nowhere", compiler)


def test_kernel_signature_is_informational(compiler):
    image = compiler.compile_incore(KERNELS / "scale.c")
    core = CoreCallable.build([ArgDirection.INOUT, ArgDirection.SCALAR], image)
    assert core.sig_count == 2 and core.sig(0) is ArgDirection.INOUT
    assert core.binary_size == len(image) == core.buffer_size()


def test_from_example_finds_a_bare_example_name_from_any_directory(
    tmp_path, monkeypatch, compiler
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SIMPLER_EXAMPLES_DIR", raising=False)
    callable = ChipCallable.from_example("formula", compiler)
    assert callable.name == "formula"
    assert callable.hashid == ChipCallable.from_example(EXAMPLES / "formula", compiler).hashid


def test_from_example_looks_in_simpler_examples_dir_first(tmp_path, monkeypatch, compiler):
    import shutil

    mine = tmp_path / "mine"
    shutil.copytree(EXAMPLES / "vector_add", mine / "vadd2")
    manifest = mine / "vadd2" / "simpler.toml"
    manifest.write_text(manifest.read_text().replace('name = "vector_add"', 'name = "vadd2"'))
    monkeypatch.setenv("SIMPLER_EXAMPLES_DIR", str(mine))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert ChipCallable.from_example("vadd2", compiler).name == "vadd2"
    # The repository's examples are still found after it.
    assert ChipCallable.from_example("gemm", compiler).name == "gemm"
    # A folder of that name in the current directory wins over both.
    (elsewhere / "gemm").mkdir()
    (elsewhere / "gemm" / "simpler.toml").write_text('name = "x\n')
    with pytest.raises(simpler.InvalidCallableError, match="line 1"):
        ChipCallable.from_example("gemm", compiler)


def test_an_unknown_example_name_lists_where_it_looked(tmp_path, monkeypatch, compiler):
    monkeypatch.setenv("SIMPLER_EXAMPLES_DIR", str(tmp_path / "mine"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(simpler.InvalidCallableError) as info:
        ChipCallable.from_example("no_such_example", compiler)
    message = str(info.value)
    assert "no_such_example" in message
    assert str(tmp_path / "mine" / "no_such_example") in message
    assert str(tmp_path / "no_such_example") in message
    assert "SIMPLER_EXAMPLES_DIR" in message
    assert len(info.value.tried) >= 3


def test_from_example_checks_entry_symbols_like_the_cli(tmp_path, compiler):
    import shutil

    ex = tmp_path / "vadd"
    shutil.copytree(EXAMPLES / "vector_add", ex)
    kernel = ex / "kernels" / "add.c"
    kernel.write_text(kernel.read_text().replace("kernel_entry", "kernel_entyr"))
    with pytest.raises(simpler.LoadError, match="does not export its entry symbol `kernel_entry`"):
        ChipCallable.from_example(ex, compiler)


def test_kernels_have_names_unique_in_the_callable(vadd, compiler, tmp_path):
    core = vadd.children[0][1]
    assert core.name == "kernel_entry" and vadd.kernel_names == {0: "kernel_entry"}
    sig = [("a", "in", "f32")]
    alpha = CoreCallable(core.binary, core_type="aiv", name="alpha")
    beta = CoreCallable.build(binary=core.binary, core_type="aiv", name="beta")
    named = ChipCallable.build(sig, binary=vadd.binary, children=[(0, alpha), (1, beta)])
    assert named.kernel_names == {0: "alpha", 1: "beta"}
    assert [c.name for _, c in named.children] == ["alpha", "beta"]
    # The names travel in the bundle.
    path = tmp_path / "named.simpler"
    named.save(path)
    assert ChipCallable.from_bundle(path).kernel_names == {0: "alpha", 1: "beta"}
    # Unnamed kernels that share an entry symbol go by it qualified with their func id, as
    # traces show them.
    plain = CoreCallable(core.binary, core_type="aiv")
    shared = ChipCallable.build(sig, binary=vadd.binary, children=[(0, plain), (1, plain)])
    assert shared.kernel_names == {0: "kernel_entry (func 0)", 1: "kernel_entry (func 1)"}
    with pytest.raises(simpler.InvalidCallableError, match="both named `alpha`"):
        ChipCallable.build(sig, binary=vadd.binary, children=[(0, alpha), (1, alpha)])
    with pytest.raises(simpler.InvalidCallableError, match="kernel name is empty"):
        ChipCallable.build(
            sig, binary=vadd.binary, children=[(0, CoreCallable(core.binary, name=""))]
        )
    with pytest.raises(simpler.ArgumentTypeError, match="name must be a str"):
        CoreCallable(core.binary, name=3)
    # From a manifest: the source's stem.
    softmax = ChipCallable.from_example(EXAMPLES / "softmax", compiler)
    assert sorted(softmax.kernel_names.values()) == ["row_normalize", "row_stats"]
    assert [k.name for k in load_manifest(EXAMPLES / "softmax").kernels] == [
        "row_stats",
        "row_normalize",
    ]
