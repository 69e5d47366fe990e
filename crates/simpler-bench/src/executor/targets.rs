//! The targets of the executor figures, printed beside them by `simpler bench --executor`
//! and never asserted: reaching them is the goal of the pool executor
//! (`docs/sim-performance.md` §4), not a property any test checks.

use serde::Serialize;

/// Which side of its value a target asks a figure to be on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The figure is at most the value.
    AtMost,
    /// The figure is at least the value.
    AtLeast,
    /// The figure is about the value.
    About,
}

/// One target: a bound, its value in the figure's unit, and the text printed for it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Target {
    /// The side of `value` the figure should be on.
    pub bound: Bound,
    /// The value, in the figure's unit (a ratio as a fraction: 90 % is 0.9).
    pub value: f64,
    /// The target as printed, unit included (`<= 20 us`).
    pub text: &'static str,
}

impl Target {
    /// True when `figure` meets the target (`About` within 10 % of the value, or within
    /// 10 of its unit when the value is zero).
    pub fn met_by(&self, figure: f64) -> bool {
        match self.bound {
            Bound::AtMost => figure <= self.value,
            Bound::AtLeast => figure >= self.value,
            Bound::About => (figure - self.value).abs() <= (self.value.abs() * 0.1).max(10.0),
        }
    }
}

/// The targets of the figures that have one.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Targets {
    /// Empty-run round trip, µs.
    pub empty_run_us: Target,
    /// 1-task run round trip, µs.
    pub one_task_run_us: Target,
    /// Short runs, depth-2 ÷ depth-1 rate.
    pub depth2_over_depth1: Target,
    /// Independent no-op tasks on 24 cores, tasks/s.
    pub independent_24_tasks_per_s: Target,
    /// A dependency chain on 24 cores, tasks/s.
    pub chain_24_tasks_per_s: Target,
    /// 72-core ÷ 24-core rate, either graph.
    pub scaling_72_over_24: Target,
    /// Submit cost, µs per task.
    pub submit_us_per_task: Target,
    /// Many chips' concurrent round trip ÷ one chip's.
    pub chips_over_one_chip: Target,
    /// The idle worker's CPU time over its window, ms.
    pub idle_cpu_ms: Target,
    /// Record read with the largest successor ÷ with the smallest.
    pub record_read_largest_over_smallest: Target,
}

const fn target(bound: Bound, value: f64, text: &'static str) -> Target {
    Target { bound, value, text }
}

/// The targets.
pub const TARGETS: Targets = Targets {
    empty_run_us: target(Bound::AtMost, 20.0, "<= 20 us"),
    one_task_run_us: target(Bound::AtMost, 30.0, "<= 30 us"),
    depth2_over_depth1: target(Bound::AtLeast, 1.5, ">= 1.5x"),
    independent_24_tasks_per_s: target(Bound::AtLeast, 1e6, ">= 1M/s"),
    chain_24_tasks_per_s: target(Bound::AtLeast, 3e5, ">= 300k/s"),
    scaling_72_over_24: target(Bound::AtLeast, 0.9, ">= 90%"),
    submit_us_per_task: target(Bound::AtMost, 0.2, "<= 0.2 us"),
    chips_over_one_chip: target(Bound::AtMost, 2.0, "<= 2x"),
    idle_cpu_ms: target(Bound::About, 0.0, "~ 0 ms"),
    record_read_largest_over_smallest: target(Bound::AtMost, 1.5, "<= 1.5x"),
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_read_the_right_way() {
        assert!(TARGETS.empty_run_us.met_by(19.0));
        assert!(!TARGETS.empty_run_us.met_by(21.0));
        assert!(TARGETS.depth2_over_depth1.met_by(1.6));
        assert!(!TARGETS.depth2_over_depth1.met_by(1.4));
        assert!(TARGETS.idle_cpu_ms.met_by(3.0));
        assert!(!TARGETS.idle_cpu_ms.met_by(500.0));
    }
}
