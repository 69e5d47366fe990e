"""KernelCompiler: flags, the content-hash cache, diagnostics, packaged headers."""

import os
from pathlib import Path

import pytest
import simpler
from conftest import KERNELS
from simpler import KernelCompiler

ELF = b"\x7fELF"


def test_headers_ship_inside_the_package():
    include = simpler.include_dir()
    assert (include / "simpler" / "kernel.h").is_file()
    assert (include / "simpler" / "orchestration.h").is_file()
    if "SIMPLER_INCLUDE_DIR" not in os.environ:
        assert Path(simpler.__file__).parent in include.parents


def test_compiles_a_kernel_and_caches_it(tmp_path):
    kc = KernelCompiler(cache_dir=tmp_path)
    first = kc.compile_incore(KERNELS / "scale.c", core_type="aiv")
    assert first[:4] == ELF
    assert (kc.hits, kc.misses) == (0, 1)
    assert kc.compile_incore(KERNELS / "scale.c", core_type="aiv") == first
    assert (kc.hits, kc.misses) == (1, 1)
    # Another core type is another flag set: another entry.
    kc.compile_incore(KERNELS / "scale.c", core_type="aic")
    assert kc.misses == 2
    # A fresh compiler (another process) finds the entries on disk.
    again = KernelCompiler(cache_dir=tmp_path)
    again.compile_incore(KERNELS / "scale.c", core_type="aiv")
    assert (again.hits, again.misses) == (1, 0)


def test_editing_an_included_header_misses_the_cache(tmp_path):
    src = tmp_path / "k.c"
    header = tmp_path / "k.h"
    header.write_text("#define FACTOR 2.0f\n")
    src.write_text(
        '#include "simpler/kernel.h"\n#include "k.h"\n'
        "SIMPLER_KERNEL void kernel_entry(int64_t *args) {\n"
        "    SIMPLER_TENSOR_DATA(float, simpler_arg_tensor(args, 0))[0] *= FACTOR;\n}\n"
    )
    kc = KernelCompiler(cache_dir=tmp_path / "cache")
    kc.compile_incore(src, core_type="aiv")
    kc.compile_incore(src, core_type="aiv")
    assert (kc.hits, kc.misses) == (1, 1)
    header.write_text("#define FACTOR 3.0f\n")
    kc.compile_incore(src, core_type="aiv")
    assert (kc.hits, kc.misses) == (1, 2)
    src.write_text(src.read_text() + "/* edited */\n")
    kc.compile_incore(src, core_type="aiv")
    assert kc.misses == 3


def test_compile_errors_name_file_and_line(tmp_path):
    kc = KernelCompiler(cache_dir=tmp_path)
    with pytest.raises(simpler.CompileError) as info:
        kc.compile_incore(KERNELS / "broken.c")
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.file.endswith("broken.c") and err.line == 6
    assert "undeclared_identifier" in str(err)
    assert "broken.c:6" in str(err)
    assert not list(tmp_path.glob("*.so")), "a failed compile leaves nothing in the cache"


def test_a_missing_header_is_a_compile_error(tmp_path):
    src = tmp_path / "m.c"
    src.write_text('#include "no_such_header.h"\n')
    with pytest.raises(simpler.CompileError) as info:
        KernelCompiler(cache_dir=tmp_path).compile_incore(src)
    assert info.value.line == 1 and "no_such_header.h" in str(info.value)


def test_a_missing_compiler_is_reported(tmp_path):
    kc = KernelCompiler(cache_dir=tmp_path, cc="/nonexistent/cc-for-simpler")
    with pytest.raises(simpler.CompilerNotFoundError) as info:
        kc.compile_incore(KERNELS / "scale.c")
    assert isinstance(info.value, FileNotFoundError)


def test_cc_environment_variable_is_honoured(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "cc -DFROM_ENV=1")
    kc = KernelCompiler(cache_dir=tmp_path)
    assert kc.cc == ["cc", "-DFROM_ENV=1"]
    assert kc.compile_incore(KERNELS / "scale.c")[:4] == ELF


def test_bad_arguments(tmp_path):
    kc = KernelCompiler(cache_dir=tmp_path)
    with pytest.raises(ValueError):
        kc.compile_incore(KERNELS / "scale.c", core_type="gpu")
    # One orchestration library serves both runtime variants; another name is refused.
    assert kc.compile_orchestration("host_build_graph", KERNELS / "one_task_orch.c") == (
        kc.compile_orchestration("tensormap_and_ringbuffer", KERNELS / "one_task_orch.c")
    )
    with pytest.raises(simpler.InvalidConfigError, match="host_build_graph"):
        kc.compile_orchestration("aicpu_build_graph", KERNELS / "one_task_orch.c")
    with pytest.raises(simpler.CompileError, match="does not exist"):
        kc.compile_incore(tmp_path / "missing.c")
    with pytest.raises(NotImplementedError):
        KernelCompiler("a5")


def test_kernels_get_the_core_defines_of_simpler_build(tmp_path):
    src = tmp_path / "cube.c"
    src.write_text(
        '#include "simpler/kernel.h"\n#ifndef __DAV_CUBE__\n#error not built as a cube kernel\n'
        "#endif\nSIMPLER_KERNEL void kernel_entry(int64_t *args) { (void)args; }\n"
    )
    kc = KernelCompiler(cache_dir=tmp_path / "cache")
    assert kc.compile_incore(src, core_type="aic")[:4] == ELF
    with pytest.raises(simpler.CompileError, match="not built as a cube kernel"):
        kc.compile_incore(src, core_type="aiv")
    with pytest.raises(simpler.CompileError, match="not built as a cube kernel"):
        kc.compile_orchestration(src)


def test_the_cache_entry_is_where_cache_path_says(tmp_path):
    kc = KernelCompiler(cache_dir=tmp_path)
    image = kc.compile(KERNELS / "scale.c", flags=["-DX=1"])
    entry = kc.cache_path(KERNELS / "scale.c", flags=["-DX=1"])
    assert entry.parent == tmp_path and entry.read_bytes() == image
    assert kc.cache_path(KERNELS / "scale.c") != entry


def test_native_allclose_follows_numpy():
    import numpy as np
    from simpler import _native

    def report(a, e, rtol=0.0, atol=0.0, equal_nan=False):
        a = np.asarray(a, np.float64)
        e = np.asarray(e, np.float64)
        return _native.allclose(a.tobytes(), e.tobytes(), "f64", rtol, atol, equal_nan)

    assert report([1.0, 2.0], [1.0, 2.0])[1] == 0
    # Asymmetric in the expected value, like numpy.isclose(actual, expected).
    assert report([5.0], [10.0], rtol=0.5)[1] == 0
    assert report([10.0], [5.0], rtol=0.5)[1] == 1
    nan = float("nan")
    assert report([nan], [nan])[1] == 1
    assert report([nan], [nan], equal_nan=True)[1] == 0
    total, bad, max_err, first, worst = report([0.0, 9.0, 2.0], [1.0, 1.0, 2.0], atol=0.5)
    assert (total, bad, max_err) == (3, 2, 8.0)
    assert first == (0, 0.0, 1.0) and worst == (1, 9.0, 1.0)
    f16 = np.array([1.0, 2.0], np.float16).tobytes()
    assert _native.allclose(f16, f16, "f16", 0.0, 0.0)[1] == 0
    with pytest.raises(ValueError):
        _native.allclose(b"", b"", "f32", -1.0, 0.0)


def test_native_scalars_refuse_values_out_of_range():
    from simpler import _native

    assert _native.parse_scalar("1.0", "f16") == 0x3C00
    assert _native.encode_scalar(-1, simpler.DataType.INT32) == (1 << 64) - 1
    assert _native.encode_scalar(2.5, simpler.DataType.BFLOAT16) == 0x4020
    for value, dtype in [("1e400", "f32"), ("300", "u8"), ("70000", "f16")]:
        with pytest.raises(simpler.InvalidArgumentError, match="out of range"):
            _native.parse_scalar(value, dtype)
    with pytest.raises(simpler.InvalidArgumentError):
        _native.encode_scalar(300, simpler.DataType.UINT8)
