//! C sources of small examples for `simpler build`: kernels that crash, and the example
//! around them — a `simpler.toml` of arguments `x` (f32, in), `y` (f32) and the u32 scalar
//! `mode`, and an orchestration that submits one AIV task of kernel func `mode` over `x` and
//! `y`. How they are built (the `simpler` binary, or the toolchain as a library) is each
//! test's own.

use std::fmt::Write;

/// Kernel `null_deref`: writes through a NULL pointer (SIGSEGV at address 0).
pub const NULL_DEREF_C: &str = r#"#include "simpler/kernel.h"

SIMPLER_KERNEL void null_deref(int64_t *args) {
    (void)args;
    *(volatile float *)0 = 1.0f;
}
"#;

/// What [`ABORT_C`] writes to stderr before it aborts.
pub const ABORT_LINE: &str = "abort kernel: giving up now";

/// Kernel `call_abort`: writes [`ABORT_LINE`] to stderr, then calls `abort()` (SIGABRT).
pub const ABORT_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include "simpler/kernel.h"

SIMPLER_KERNEL void call_abort(int64_t *args) {
    (void)args;
    fprintf(stderr, "abort kernel: giving up now\n");
    fflush(stderr);
    abort();
}
"#;

/// How an example's `y` is declared and passed to its task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Y {
    /// An output (`direction = "out"`), passed as OUTPUT_EXISTING.
    Out,
    /// Read and written (`direction = "inout"`), passed as INOUT.
    InOut,
}

/// A kernel of an example: its func id, its source file (relative to the example folder) and
/// its entry symbol.
#[derive(Clone, Copy, Debug)]
pub struct Kernel<'a> {
    /// Func id the orchestration submits it under (the `mode` that selects it).
    pub func_id: u32,
    /// Source file, relative to the example folder.
    pub source: &'a str,
    /// Entry symbol.
    pub entry: &'a str,
}

/// The `simpler.toml` of example `name`: orchestration `orchestration.c`, AIV `kernels`, and
/// arguments `x`, `y` (as `y` says) and `mode`; the tensors have `shape` when given, any
/// shape otherwise.
pub fn manifest(name: &str, kernels: &[Kernel<'_>], y: Y, shape: Option<&[u64]>) -> String {
    let mut m = format!("name = \"{name}\"\n\n[orchestration]\nsource = \"orchestration.c\"\n");
    for k in kernels {
        let (id, source, entry) = (k.func_id, k.source, k.entry);
        let _ = write!(
            m,
            "\n[[kernels]]\nfunc_id = {id}\ncore = \"aiv\"\nsource = \"{source}\"\n\
             entry = \"{entry}\"\n"
        );
    }
    let shape = shape.map_or(String::new(), |s| {
        let dims: Vec<String> = s.iter().map(u64::to_string).collect();
        format!("shape = [{}]\n", dims.join(", "))
    });
    let y_direction = match y {
        Y::Out => "out",
        Y::InOut => "inout",
    };
    for (arg, direction) in [("x", "in"), ("y", y_direction)] {
        let _ = write!(
            m,
            "\n[[args]]\nname = \"{arg}\"\ndirection = \"{direction}\"\ndtype = \"f32\"\n{shape}"
        );
    }
    m.push_str("\n[[args]]\nname = \"mode\"\ndirection = \"scalar\"\ndtype = \"u32\"\n");
    m
}

/// The example's `orchestration.c`: one AIV task of kernel func `mode` (scalar 0), `x`
/// as its input and `y` as `y` says. With `null_deref_on`, that mode writes through a NULL
/// pointer in the orchestration instead (SIGSEGV on an AICPU thread).
pub fn orchestration(y: Y, null_deref_on: Option<u32>) -> String {
    let add_y = match y {
        Y::Out => "simpler_task_add_output_existing",
        Y::InOut => "simpler_task_add_inout",
    };
    let crash = null_deref_on.map_or(String::new(), |m| {
        format!("    if (mode == {m}) *(volatile int *)0 = 1;\n")
    });
    format!(
        r#"#include "simpler/orchestration.h"

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {{
    const int32_t mode = (int32_t)args->scalars[0];
{crash}    SimplerTaskDesc d;
    simpler_task_init(&d, SIMPLER_CORE_AIV, mode);
    simpler_task_add_input(&d, &args->tensors[0]);
    {add_y}(&d, &args->tensors[1]);
    return simpler_submit(ops, &d, NULL);
}}
"#
    )
}
