//! The `#[repr(C)]` mirrors of the structs and enums of `include/simpler/host.h`, with the
//! header's layout numbers asserted at compile time (`docs/c-abi.md`). This module only
//! describes memory; reading a caller's struct is [`crate::raw`]'s.

use simpler_abi::assert_layout;

/// `SimplerContextConfig`: how a context is made. Zero means "the default" for every field
/// after `size` and `version`; the library reads at most `size` bytes (a field past `size`
/// counts as zero), so the struct may grow at its end.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimplerContextConfig {
    /// `sizeof(SimplerContextConfig)` as the caller compiled it (bytes, ≥ 8).
    pub size: u32,
    /// [`CONTEXT_CONFIG_VERSION`].
    pub version: u32,
    /// Sim device clusters (1..=24; 0: 8). Owned init only.
    pub clusters: u32,
    /// Sim device AICPU threads (2..=8; 0: 4). Owned init only.
    pub aicpu_threads: u32,
    /// `SimplerMemcheck` (0: from `SIMPLER_SIM_MEMCHECK`). Owned init only.
    pub sim_memcheck: u32,
    /// AICPU threads a run uses (0: all).
    pub aicpu_thread_num: u32,
    /// Runs on the device at once, 1 or 2 (0: 2).
    pub launch_depth: u32,
    /// Task slots per ring, a power of two ≥ 4 (0: the default).
    pub task_window: u32,
    /// Device output-heap bytes (0: 256 MiB).
    pub heap_size: u64,
    /// A run's completion timeout, ms (0: the environment's or 50 s).
    pub run_timeout_ms: u64,
    /// The scheduler's no-progress watchdog, ms (0: the environment's or 10 s).
    pub scheduler_timeout_ms: u64,
    /// One kernel dispatch's limit, µs (0: the environment's or 45 s).
    pub op_execute_timeout_us: u64,
    /// `get/set_tensor_data`'s limit, ms (0: the environment's or 15 s).
    pub tensor_data_timeout_ms: u64,
    /// 1: provision the sim chip's SDMA engine (`docs/sim-device.md` §12); 0: none. Owned
    /// init only.
    pub enable_sdma: u32,
    /// `SimplerRuntime` ([`runtime`]): the runtime variant of runs whose callable and run
    /// config name none (0: `tensormap_and_ringbuffer`).
    pub runtime: u32,
}
assert_layout!(
    SimplerContextConfig,
    size = 80,
    version = 4,
    clusters = 8,
    aicpu_threads = 12,
    sim_memcheck = 16,
    aicpu_thread_num = 20,
    launch_depth = 24,
    task_window = 28,
    heap_size = 32,
    run_timeout_ms = 40,
    scheduler_timeout_ms = 48,
    op_execute_timeout_us = 56,
    tensor_data_timeout_ms = 64,
    enable_sdma = 72,
    runtime = 76
);

/// The only `SimplerContextConfig.version`.
pub const CONTEXT_CONFIG_VERSION: u32 = 1;

/// `SimplerRunConfig`: options of one run; zero means "the context's setting". Same
/// size/version rule as [`SimplerContextConfig`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimplerRunConfig {
    /// `sizeof(SimplerRunConfig)` as the caller compiled it (bytes, ≥ 8).
    pub size: u32,
    /// [`RUN_CONFIG_VERSION`].
    pub version: u32,
    /// AICPU threads of the run (2..=the device's; 0: the context's).
    pub aicpu_thread_num: u32,
    /// Must be 0.
    pub reserved: u32,
    /// Every ring's task window (0: default).
    pub ring_task_window: u64,
    /// Every ring's output-heap bytes (0: default).
    pub ring_heap: u64,
    /// Every ring's dependency-pool entries (0: default).
    pub ring_dep_pool: u64,
    /// `SimplerRuntime` ([`runtime`]): this run's runtime variant (0: the callable's, else
    /// the context's).
    pub runtime: u32,
    /// Must be 0.
    pub reserved2: u32,
}
assert_layout!(
    SimplerRunConfig,
    size = 48,
    aicpu_thread_num = 8,
    reserved = 12,
    ring_task_window = 16,
    ring_heap = 24,
    ring_dep_pool = 32,
    runtime = 40,
    reserved2 = 44
);

/// The only `SimplerRunConfig.version`.
pub const RUN_CONFIG_VERSION: u32 = 1;

/// `SimplerArgKind` values.
pub mod arg_kind {
    /// Host memory lent in place.
    pub const HOST_TENSOR: u32 = 1;
    /// Device memory from `simpler_malloc`.
    pub const DEVICE_TENSOR: u32 = 2;
    /// A scalar's raw bits.
    pub const SCALAR: u32 = 3;
}

/// Most dimensions of a tensor argument (`SIMPLER_MAX_TENSOR_DIMS`).
pub const MAX_DIMS: usize = 5;

/// `SimplerArg`: one run argument, tagged by `kind`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SimplerArg {
    /// `SimplerArgKind` ([`arg_kind`]).
    pub kind: u32,
    /// `SimplerDataType` wire value (tensors).
    pub dtype: u32,
    /// 1..=5 (tensors).
    pub ndims: u32,
    /// Must be 0.
    pub reserved: u32,
    /// Elements per dimension; the first `ndims` count.
    pub shape: [u64; MAX_DIMS],
    /// Host tensor: the first byte, C order.
    pub host_ptr: *mut u8,
    /// Host tensor: bytes at `host_ptr`.
    pub nbytes: u64,
    /// Device tensor: the first byte.
    pub device_ptr: u64,
    /// Scalar: raw bits.
    pub scalar_bits: u64,
}
assert_layout!(
    SimplerArg,
    size = 88,
    dtype = 4,
    ndims = 8,
    reserved = 12,
    shape = 16,
    host_ptr = 56,
    nbytes = 64,
    device_ptr = 72,
    scalar_bits = 80
);

/// `SimplerMemcheck` values.
pub mod memcheck {
    /// `SIMPLER_SIM_MEMCHECK` decides.
    pub const FROM_ENV: u32 = 0;
    /// No guard pages.
    pub const OFF: u32 = 1;
    /// A guard page after each allocation.
    pub const AFTER: u32 = 2;
    /// A guard page before each allocation.
    pub const BEFORE: u32 = 3;
}

/// `SimplerRuntime` values: a runtime variant (`docs/chip-runtime.md` §17), 0 meaning
/// "not named here".
pub mod runtime {
    /// Not named here: the next level decides (run → callable → context → default).
    pub const DEFAULT: u32 = 0;
    /// `tensormap_and_ringbuffer`.
    pub const TENSORMAP_AND_RINGBUFFER: u32 = 1;
    /// `host_build_graph`.
    pub const HOST_BUILD_GRAPH: u32 = 2;
}

/// `simpler_capabilities` bits.
pub mod capability {
    /// `simpler_launch_run(_joined)`.
    pub const PROGRAM_LAUNCH: u64 = 1 << 0;
    /// `simpler_launch_run_on_stream`.
    pub const CALLER_STREAM: u64 = 1 << 1;
    /// The `simpler_sim_*` caller contexts.
    pub const SIM_CONTEXT: u64 = 1 << 2;
    /// Kernel-mode launch: never reported (the entry is closed).
    pub const KERNEL_MODE_LAUNCH: u64 = 1 << 3;
}

/// `SIMPLER_WAIT_FOREVER`.
pub const WAIT_FOREVER: u64 = u64::MAX;

const _: () = assert!(
    std::mem::size_of::<*mut u8>() == 8,
    "the C ABI needs 64-bit pointers"
);

impl crate::raw::Versioned for SimplerContextConfig {
    const NAME: &'static str = "SimplerContextConfig";
    const VERSION: u32 = CONTEXT_CONFIG_VERSION;
}

impl crate::raw::Versioned for SimplerRunConfig {
    const NAME: &'static str = "SimplerRunConfig";
    const VERSION: u32 = RUN_CONFIG_VERSION;
}

/// `SimplerDomainConfig` (`include/simpler/domain.h`): how a collectives domain is made.
/// Zero or NULL means "the default" for every field after `size` and `version`; the same
/// size/version rule as [`SimplerContextConfig`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimplerDomainConfig {
    /// `sizeof(SimplerDomainConfig)` as the caller compiled it (bytes, ≥ 8).
    pub size: u32,
    /// [`DOMAIN_CONFIG_VERSION`].
    pub version: u32,
    /// Chips, one rank each: 1..=[`DOMAIN_MAX_RANKS`] (0: 2).
    pub ranks: u32,
    /// Must be 0.
    pub reserved: u32,
    /// Every chip's configuration (NULL: the defaults).
    pub chip: *const SimplerContextConfig,
    /// The C compiler command, NUL-terminated (NULL: `$CC`, else `cc`).
    pub cc: *const std::ffi::c_char,
    /// The kernel cache directory, NUL-terminated (NULL: where the environment says).
    pub cache_dir: *const std::ffi::c_char,
}
assert_layout!(
    SimplerDomainConfig,
    size = 40,
    version = 4,
    ranks = 8,
    reserved = 12,
    chip = 16,
    cc = 24,
    cache_dir = 32
);

impl Default for SimplerDomainConfig {
    fn default() -> SimplerDomainConfig {
        SimplerDomainConfig {
            size: 0,
            version: 0,
            ranks: 0,
            reserved: 0,
            chip: std::ptr::null(),
            cc: std::ptr::null(),
            cache_dir: std::ptr::null(),
        }
    }
}

impl crate::raw::Versioned for SimplerDomainConfig {
    const NAME: &'static str = "SimplerDomainConfig";
    const VERSION: u32 = DOMAIN_CONFIG_VERSION;
}

/// The only `SimplerDomainConfig.version`.
pub const DOMAIN_CONFIG_VERSION: u32 = 1;

/// The most ranks (chips) of one domain (`SIMPLER_DOMAIN_MAX_RANKS`).
pub const DOMAIN_MAX_RANKS: u32 = 64;

/// The longest wait of a collective, ms (`SIMPLER_DOMAIN_MAX_TIMEOUT_MS`): the
/// collectives' own limit ([`simpler_worker::collectives::MAX_TIMEOUT`]).
pub const DOMAIN_MAX_TIMEOUT_MS: u64 = simpler_worker::collectives::MAX_TIMEOUT.as_millis() as u64;

/// The opaque `SimplerDomain` (never dereferenced: its handle value is an id,
/// [`crate::handles`]).
#[repr(C)]
pub struct SimplerDomain {
    _opaque: [u8; 0],
}

/// The opaque `SimplerContext` (never dereferenced: its handle value is an id,
/// [`crate::handles`]).
#[repr(C)]
pub struct SimplerContext {
    _opaque: [u8; 0],
}

/// The opaque `SimplerRecording` (never dereferenced: its handle value is an id,
/// [`crate::handles`]).
#[repr(C)]
pub struct SimplerRecording {
    _opaque: [u8; 0],
}

/// The opaque `SimplerRun` (never dereferenced: its handle value is an id,
/// [`crate::handles`]).
#[repr(C)]
pub struct SimplerRun {
    _opaque: [u8; 0],
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Rust values of the header's enums and constants, by the header's own text (the
    /// header `_Static_assert`s the same numbers).
    #[test]
    fn enum_values_and_constants_match_the_header() {
        let h = include_str!("../../../include/simpler/host.h");
        let cases = [
            (
                "SIMPLER_ARG_HOST_TENSOR = ",
                u64::from(arg_kind::HOST_TENSOR),
            ),
            (
                "SIMPLER_ARG_DEVICE_TENSOR = ",
                u64::from(arg_kind::DEVICE_TENSOR),
            ),
            ("SIMPLER_ARG_SCALAR = ", u64::from(arg_kind::SCALAR)),
            (
                "SIMPLER_MEMCHECK_FROM_ENV = ",
                u64::from(memcheck::FROM_ENV),
            ),
            ("SIMPLER_MEMCHECK_OFF = ", u64::from(memcheck::OFF)),
            ("SIMPLER_MEMCHECK_AFTER = ", u64::from(memcheck::AFTER)),
            ("SIMPLER_MEMCHECK_BEFORE = ", u64::from(memcheck::BEFORE)),
            ("SIMPLER_RUNTIME_DEFAULT = ", u64::from(runtime::DEFAULT)),
            (
                "SIMPLER_RUNTIME_TENSORMAP_AND_RINGBUFFER = ",
                u64::from(runtime::TENSORMAP_AND_RINGBUFFER),
            ),
            (
                "SIMPLER_RUNTIME_HOST_BUILD_GRAPH = ",
                u64::from(runtime::HOST_BUILD_GRAPH),
            ),
            (
                "#define SIMPLER_CONTEXT_CONFIG_VERSION ",
                u64::from(CONTEXT_CONFIG_VERSION),
            ),
            (
                "#define SIMPLER_RUN_CONFIG_VERSION ",
                u64::from(RUN_CONFIG_VERSION),
            ),
            ("#define SIMPLER_MAX_TENSOR_DIMS ", MAX_DIMS as u64),
            (
                "#define SIMPLER_CAP_PROGRAM_LAUNCH (1ull << ",
                capability::PROGRAM_LAUNCH.trailing_zeros().into(),
            ),
            (
                "#define SIMPLER_CAP_CALLER_STREAM (1ull << ",
                capability::CALLER_STREAM.trailing_zeros().into(),
            ),
            (
                "#define SIMPLER_CAP_SIM_CONTEXT (1ull << ",
                capability::SIM_CONTEXT.trailing_zeros().into(),
            ),
            (
                "#define SIMPLER_CAP_KERNEL_MODE_LAUNCH (1ull << ",
                capability::KERNEL_MODE_LAUNCH.trailing_zeros().into(),
            ),
        ];
        for (prefix, value) in cases {
            let at = h
                .find(prefix)
                .unwrap_or_else(|| panic!("host.h lacks `{prefix}`"))
                + prefix.len();
            let digits: String = h[at..].chars().take_while(char::is_ascii_digit).collect();
            assert_eq!(digits.parse::<u64>().ok(), Some(value), "{prefix}");
        }
        assert!(h.contains("#define SIMPLER_WAIT_FOREVER UINT64_MAX"));
        assert_eq!(WAIT_FOREVER, u64::MAX);
    }

    #[test]
    fn domain_constants_match_their_header() {
        let h = include_str!("../../../include/simpler/domain.h");
        for (line, value) in [
            (
                "#define SIMPLER_DOMAIN_CONFIG_VERSION ",
                u64::from(DOMAIN_CONFIG_VERSION),
            ),
            (
                "#define SIMPLER_DOMAIN_MAX_RANKS ",
                u64::from(DOMAIN_MAX_RANKS),
            ),
            (
                "#define SIMPLER_DOMAIN_MAX_TIMEOUT_MS ",
                DOMAIN_MAX_TIMEOUT_MS,
            ),
        ] {
            let at = h
                .find(line)
                .unwrap_or_else(|| panic!("domain.h lacks `{line}`"))
                + line.len();
            let digits: String = h[at..].chars().take_while(char::is_ascii_digit).collect();
            assert_eq!(digits.parse::<u64>().ok(), Some(value), "{line}");
        }
    }
}
