//! `include/simpler/async.h` against `simpler_abi::deferred`: a C program (strict `-std=c11
//! -Wall -Wextra -Werror`) and the Rust calls run the same scenarios on a slab of their own
//! behind a faked argument array (slot 52) and print what the slab holds afterwards; the two
//! transcripts must be equal, and the layout numbers must be Rust's. Scenarios: counter
//! waits (64- and 32-bit, misaligned, null), an SDMA copy through a submit call that records its arguments, a refused copy, a
//! worker without SDMA, and the 65th condition.

use crate::cc;

use std::fmt::Write;
use std::mem::{offset_of, size_of};
use std::process::Command;

use simpler_abi::deferred::*;
use simpler_abi::*;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <string.h>
#include "simpler/async.h"
#include "simpler/run.h"

typedef unsigned long long ull;
static ull last_dst, last_src, last_bytes;
static uint64_t submit(uint64_t engine, uint64_t dst, uint64_t src, uint64_t bytes) {
    last_dst = dst; last_src = src; last_bytes = bytes;
    return bytes == 0 ? 0 : engine + bytes;
}
static void dump(const char *what, int rc, const SimplerDeferredSlab *s) {
    printf("%s rc=%d count=%u error=%u", what, rc, s->count, s->error);
    for (uint32_t i = 0; i < s->count && i < 3; i++)
        printf(" [%u %u %llu %llu]", s->conditions[i].engine, s->conditions[i].flags,
               (ull)s->conditions[i].addr, (ull)s->conditions[i].value);
    printf("\n");
}
int main(void) {
    printf("layout %zu %zu %zu %zu %d\n", sizeof(SimplerDeferredCondition), sizeof(SimplerDeferredSlab),
           offsetof(SimplerDeferredSlab, conditions), sizeof(SimplerCoreMailbox), SIMPLER_ASYNC_SLAB_SLOT);
    static SimplerDeferredSlab s;
    int64_t args[64] = {0};
    args[SIMPLER_ASYNC_SLAB_SLOT] = (int64_t)(uintptr_t)&s;
    int rc = simpler_async_wait_counter(args, (const uint64_t *)(uintptr_t)4096, 7);
    dump("counter", rc, &s);
    memset(&s, 0, sizeof s);
    rc = simpler_async_wait_counter32(args, (const uint32_t *)(uintptr_t)4100, 9);
    dump("counter32", rc, &s);
    memset(&s, 0, sizeof s);
    rc = simpler_async_wait_counter(args, (const uint64_t *)(uintptr_t)4100, 1);
    dump("misaligned", rc, &s);
    memset(&s, 0, sizeof s);
    rc = simpler_async_wait_counter32(args, NULL, 1);
    dump("null32", rc, &s);
    memset(&s, 0, sizeof s);
    rc = simpler_sdma_copy(args, (void *)(uintptr_t)8192, (const void *)(uintptr_t)12288, 100);
    dump("no-sdma", rc, &s);
    memset(&s, 0, sizeof s);
    s.sdma_submit = (uint64_t)(uintptr_t)&submit;
    s.sdma_engine = 1000;
    rc = simpler_sdma_copy(args, (void *)(uintptr_t)8192, (const void *)(uintptr_t)12288, 100);
    dump("sdma", rc, &s);
    printf("submitted %llu %llu %llu\n", last_dst, last_src, last_bytes);
    rc = simpler_sdma_copy(args, (void *)(uintptr_t)8192, (const void *)(uintptr_t)12288, 0);
    dump("refused", rc, &s);
    memset(&s, 0, sizeof s);
    SimplerDeferredCondition roce = {SIMPLER_ASYNC_ENGINE_ROCE, 0, 5, 6};
    rc = simpler_async_register(args, roce);
    dump("register", rc, &s);
    memset(&s, 0, sizeof s);
    for (int i = 0; i < 64; i++) rc |= simpler_async_wait_counter(args, (const uint64_t *)(uintptr_t)(8 * i + 8), (uint64_t)i);
    dump("full", rc, &s);
    rc = simpler_async_wait_counter(args, (const uint64_t *)(uintptr_t)8, 1);
    dump("overflow", rc, &s);
    s.sdma_submit = (uint64_t)(uintptr_t)&submit;
    rc = simpler_sdma_copy(args, (void *)(uintptr_t)8192, (const void *)(uintptr_t)12288, 100);
    dump("overflow-sdma", rc, &s);
    return 0;
}
"#;

static mut LAST: (u64, u64, u64) = (0, 0, 0);

unsafe extern "C" fn submit(engine: u64, dst: u64, src: u64, bytes: u64) -> u64 {
    // SAFETY: the test calls this from one thread.
    unsafe { LAST = (dst, src, bytes) };
    if bytes == 0 {
        0
    } else {
        engine + bytes
    }
}

fn dump(out: &mut String, what: &str, rc: i32, s: &DeferredSlab) {
    write!(out, "{what} rc={rc} count={} error={}", s.count, s.error).unwrap();
    for c in s.conditions.iter().take((s.count as usize).min(3)) {
        write!(out, " [{} {} {} {}]", c.engine, c.flags, c.addr, c.value).unwrap();
    }
    out.push('\n');
}

fn rust_transcript() -> String {
    let mut out = format!(
        "layout {} {} {} {} {}\n",
        size_of::<DeferredCondition>(),
        size_of::<DeferredSlab>(),
        offset_of!(DeferredSlab, conditions),
        size_of::<CoreMailbox>(),
        ASYNC_SLAB_SLOT
    );
    let mut s = Box::<DeferredSlab>::default();
    let mut args = [0i64; 64];
    args[ASYNC_SLAB_SLOT] = &mut *s as *mut DeferredSlab as i64;
    let a = args.as_mut_ptr();
    // SAFETY: slot 52 of `args` points to `s`, which outlives every call below; no address
    // registered here is read, and the recording submit call touches no copy address.
    unsafe {
        let rc = wait_counter(a, 4096 as *const u64, 7);
        dump(&mut out, "counter", rc, &s);
        *s = DeferredSlab::default();
        let rc = wait_counter32(a, 4100 as *const u32, 9);
        dump(&mut out, "counter32", rc, &s);
        *s = DeferredSlab::default();
        let rc = wait_counter(a, 4100 as *const u64, 1);
        dump(&mut out, "misaligned", rc, &s);
        *s = DeferredSlab::default();
        let rc = wait_counter32(a, std::ptr::null(), 1);
        dump(&mut out, "null32", rc, &s);
        *s = DeferredSlab::default();
        let rc = sdma_copy(a, 8192 as *mut u8, 12288 as *const u8, 100);
        dump(&mut out, "no-sdma", rc, &s);
        *s = DeferredSlab::default();
        s.sdma_submit = submit as SdmaSubmit as usize as u64;
        s.sdma_engine = 1000;
        let rc = sdma_copy(a, 8192 as *mut u8, 12288 as *const u8, 100);
        dump(&mut out, "sdma", rc, &s);
        let (d, src, n) = LAST;
        writeln!(out, "submitted {d} {src} {n}").unwrap();
        let rc = sdma_copy(a, 8192 as *mut u8, 12288 as *const u8, 0);
        dump(&mut out, "refused", rc, &s);
        *s = DeferredSlab::default();
        let roce = DeferredCondition {
            engine: ASYNC_ENGINE_ROCE,
            flags: 0,
            addr: 5,
            value: 6,
        };
        let rc = register(a, roce);
        dump(&mut out, "register", rc, &s);
        *s = DeferredSlab::default();
        let mut rc = 0;
        for i in 0..64u64 {
            rc |= wait_counter(a, (8 * i + 8) as *const u64, i);
        }
        dump(&mut out, "full", rc, &s);
        let rc = wait_counter(a, std::ptr::dangling::<u64>(), 1);
        dump(&mut out, "overflow", rc, &s);
        s.sdma_submit = submit as SdmaSubmit as usize as u64;
        let rc = sdma_copy(a, 8192 as *mut u8, 12288 as *const u8, 100);
        dump(&mut out, "overflow-sdma", rc, &s);
    }
    out
}

#[test]
fn the_c_header_and_the_rust_calls_agree() {
    let exe = cc::compile(
        "async",
        PROGRAM,
        &["-std=c11", "-Wall", "-Wextra", "-Werror"],
        &[],
    );
    let run = Command::new(&exe).output().expect("run the C program");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let c = String::from_utf8(run.stdout).unwrap();
    let rust = rust_transcript();
    assert_eq!(c, rust, "C (left) and Rust (right) disagree");
    // What the transcript must say, whoever wrote it.
    let line = |what: &str| {
        rust.lines()
            .find(|l| l.starts_with(&format!("{what} ")))
            .unwrap()
            .to_string()
    };
    assert_eq!(line("layout"), "layout 24 1600 64 4544 52");
    assert_eq!(line("counter"), "counter rc=0 count=1 error=0 [0 0 4096 7]");
    assert_eq!(
        line("counter32"),
        "counter32 rc=0 count=1 error=0 [0 1 4100 9]"
    );
    assert_eq!(
        line("misaligned"),
        "misaligned rc=101 count=1 error=0 [0 0 4100 1]"
    );
    assert_eq!(line("null32"), "null32 rc=101 count=1 error=0 [0 1 0 1]");
    assert_eq!(line("no-sdma"), "no-sdma rc=101 count=1 error=0 [1 0 0 0]");
    assert_eq!(line("sdma"), "sdma rc=0 count=1 error=0 [1 0 1100 0]");
    assert_eq!(line("submitted"), "submitted 8192 12288 100");
    assert!(line("refused").starts_with("refused rc=103 count=1 error=103"));
    assert_eq!(line("register"), "register rc=0 count=1 error=0 [2 0 5 6]");
    assert!(line("full").starts_with("full rc=0 count=64 error=0"));
    assert!(line("overflow").starts_with("overflow rc=102 count=64 error=102"));
    assert!(line("overflow-sdma").starts_with("overflow-sdma rc=102 count=64 error=102"));
    assert_eq!(SCHED_ASYNC_WAIT_OVERFLOW, 102);
}
