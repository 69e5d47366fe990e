//! What the decoder-layer bench reports: per row the figures ([`DecoderRow`]), the targets
//! beside them ([`TARGETS`]), and the run's setting ([`DecoderReport`]). Plain data.

use serde::Serialize;

use super::Lengths;

/// The targets of the figures (`docs/sim-performance.md` §7).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DecoderTargets {
    /// Upper bound of [`DecoderRow::runtime_us_per_task`], µs.
    pub runtime_us_per_task: f64,
    /// Upper bound of [`DecoderRow::outside_kernels`], a share.
    pub outside_kernels: f64,
    /// Upper bound of [`DecoderRow::outside_kernels_from_trace`], a share.
    pub outside_kernels_from_trace: f64,
}

/// The targets.
pub const TARGETS: DecoderTargets = DecoderTargets {
    runtime_us_per_task: 1.0,
    outside_kernels: 0.25,
    outside_kernels_from_trace: 0.25,
};

/// The figures of one (batch, context) row.
#[derive(Clone, Debug, Serialize)]
pub struct DecoderRow {
    /// Sequences per step.
    pub batch: usize,
    /// The longest sequence, tokens.
    pub context: usize,
    /// Tasks per step, as the runtime counted them ([`RunReport::tasks`](simpler_host::RunReport::tasks)).
    pub tasks: u64,
    /// Median device time of a real step, µs.
    pub step_us: f64,
    /// Median device time of an empty-kernel step, µs.
    pub empty_step_us: f64,
    /// `empty_step_us / tasks`, µs.
    pub runtime_us_per_task: f64,
    /// `empty_step_us / step_us`, at most 1.
    pub outside_kernels: f64,
    /// `(traced step − critical-path kernel time) / traced step`, in 0..=1.
    pub outside_kernels_from_trace: f64,
    /// Median wall time of the real step's run call (staging and copy-back included), µs.
    pub wall_us: f64,
    /// Median wall time of the empty step's run call, µs.
    pub empty_wall_us: f64,
    /// Device time of the traced real step, µs.
    pub traced_step_us: f64,
    /// Kernel time of the critical path of the traced step, µs.
    pub critical_path_us: f64,
    /// Tasks on that path.
    pub critical_path_tasks: usize,
    /// Every subtask's kernel time of the traced step summed, µs: ÷ the chip's cores, the
    /// shortest step the kernels alone allow on a wide graph (beside the critical path, the
    /// shortest a deep one allows).
    pub trace_kernel_us: f64,
    /// Subtask spans the traced step recorded.
    pub trace_subtasks: usize,
    /// Dependency edges the traced step recorded.
    pub trace_edges: usize,
    /// Records per trace buffer of the traced step.
    pub trace_buffer_records: u32,
}

/// The model's sizes, as reported.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ModelSizes {
    /// Hidden size E.
    pub embed: usize,
    /// Query heads H.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// MLP width.
    pub ffn: usize,
    /// Tokens per KV-cache block.
    pub block_size: usize,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct DecoderReport {
    /// One per (batch, context), batches outer.
    pub rows: Vec<DecoderRow>,
    /// The targets.
    pub targets: DecoderTargets,
    /// The model.
    pub model: ModelSizes,
    /// Timed steps per row and callable.
    pub steps: u32,
    /// Seed of the inputs.
    pub seed: u64,
    /// How long the sequences were.
    pub lengths: Lengths,
    /// What `step_us` times: "device_time" ([`RunReport::device_time`](simpler_host::RunReport::device_time)).
    pub timed: &'static str,
    /// AICore cores of the worker's chip.
    pub cores: u32,
    /// Its AICPU threads.
    pub aicpu_threads: u32,
    /// Host CPUs.
    pub host_cpus: usize,
}
