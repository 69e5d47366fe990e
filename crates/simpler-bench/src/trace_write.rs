//! What writing a trace file costs (`docs/tracing.md`, §11): the synthetic trace of
//! `simpler_trace::sample::synthetic` (a gemm-like run on 72 cores), written to memory in each
//! format, the median of a few repetitions per format beside the 1 s target for 100k tasks.
//! Reported, never asserted. Touches no runtime: it only calls the trace crate's writers.

use std::time::Instant;

use serde::Serialize;
use simpler_host::trace_model::sample::{synthetic, SampleSpec};
use simpler_host::trace_model::{self, Format, Trace};

/// The write-time target for the 100k-task trace, milliseconds (`docs/tracing.md`, §11).
pub const TARGET_MS: f64 = 1_000.0;
/// Tasks of the trace the target is stated for.
pub const TARGET_TASKS: u64 = 100_000;

/// AIC cores of the synthetic chip (AIV cores are twice as many: 72 cores in all).
const AIC_CORES: u32 = 24;

/// The cost of writing the synthetic trace in one format.
#[derive(Clone, Debug, Serialize)]
pub struct TraceWrite {
    /// The format written: "perfetto" or "chrome".
    pub format: String,
    /// Tasks in the trace.
    pub tasks: u64,
    /// Subtasks (kernel executions) in the trace.
    pub subtasks: u64,
    /// Timed repetitions (after one untimed warm-up).
    pub reps: u32,
    /// Median time to write the whole trace into memory, milliseconds.
    pub median_ms: f64,
    /// `median_ms` per task, microseconds.
    pub us_per_task: f64,
    /// Size of the written trace, bytes.
    pub bytes: u64,
    /// Size of the written trace, MiB.
    pub mib: f64,
    /// The target for 100k tasks, milliseconds, scaled to `tasks` (linear).
    pub target_ms: f64,
}

/// The synthetic trace of `tasks` tasks on 24 AIC + 48 AIV cores that [`trace_write`] writes.
pub fn sample_trace(tasks: u64) -> Trace {
    synthetic(&SampleSpec {
        tasks: usize::try_from(tasks).unwrap_or(usize::MAX),
        aic: AIC_CORES,
        aiv: 2 * AIC_CORES,
        dropped: 0,
    })
}

/// Builds the synthetic trace of `tasks` tasks and times writing it into a `Vec<u8>` in each
/// format (Perfetto, then Chrome JSON): one warm-up write, then `reps` timed writes into the
/// same vector (cleared, its capacity kept), the median of them. `reps` 0 counts as 1.
///
/// # Errors
/// The writer's I/O error (writing to memory does not fail in practice).
pub fn trace_write(tasks: u64, reps: u32) -> std::io::Result<Vec<TraceWrite>> {
    let trace = sample_trace(tasks);
    let subtasks: usize = trace.runs().map(|(_, r)| r.subtasks.len()).sum();
    let reps = reps.max(1);
    let mut out = Vec::new();
    for format in [Format::Perfetto, Format::Chrome] {
        let mut buf = Vec::new();
        trace_model::write(&trace, format, &mut buf)?;
        let mut ms = Vec::with_capacity(reps as usize);
        for _ in 0..reps {
            buf.clear();
            let t0 = Instant::now();
            trace_model::write(&trace, format, &mut buf)?;
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let median_ms = crate::median(ms);
        out.push(TraceWrite {
            format: format.to_string(),
            tasks,
            subtasks: subtasks as u64,
            reps,
            median_ms,
            us_per_task: if tasks == 0 {
                0.0
            } else {
                median_ms * 1e3 / tasks as f64
            },
            bytes: buf.len() as u64,
            mib: buf.len() as f64 / (1024.0 * 1024.0),
            target_ms: TARGET_MS * tasks as f64 / TARGET_TASKS as f64,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_sane_for_a_tiny_trace() {
        let figures = trace_write(30, 2).unwrap();
        let formats: Vec<&str> = figures.iter().map(|f| f.format.as_str()).collect();
        assert_eq!(formats, ["perfetto", "chrome"]);
        for f in &figures {
            assert_eq!((f.tasks, f.reps), (30, 2));
            // 30 tasks of 1, 2, 2 blocks.
            assert_eq!(f.subtasks, 50, "{f:?}");
            assert!(f.median_ms > 0.0 && f.us_per_task > 0.0, "{f:?}");
            assert!(f.bytes > 1_000, "{f:?}");
            assert!((f.mib * 1024.0 * 1024.0 - f.bytes as f64).abs() < 1.0);
            assert!((f.target_ms - 0.3).abs() < 1e-9, "{f:?}");
        }
        let json = serde_json::to_value(&figures[0]).unwrap();
        assert!(json["median_ms"].is_number() && json["mib"].is_number());
    }
}
