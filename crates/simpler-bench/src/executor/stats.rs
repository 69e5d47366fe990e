//! [`Stats`]: the median and the slow tail (p99) of a figure's samples. Pure arithmetic;
//! this module measures nothing.

use serde::Serialize;

/// The median and 99th percentile of one figure's samples.
///
/// `p99` is always the slow tail: for a time (µs, ms) the 99th-percentile sample, for a
/// rate (per second) the rate at the 99th-percentile time — 99 % of the samples were at
/// least that fast. With fewer than 100 samples it is the slowest sample (nearest rank).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stats {
    /// The median sample, in the figure's unit.
    pub median: f64,
    /// The 99th-percentile (slow-tail) sample, in the figure's unit.
    pub p99: f64,
    /// Samples the figure is taken over.
    pub samples: usize,
}

/// The sample at nearest rank `ceil(q × n)` (1-based) of sorted `v`; `v` is not empty.
pub(crate) fn rank(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let r = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[r - 1]
}

impl Stats {
    /// The figures of time samples (any unit): median and 99th percentile.
    ///
    /// # Panics
    /// If `samples` is empty (every measurement takes at least one sample).
    pub fn of_times(samples: &[f64]) -> Stats {
        assert!(!samples.is_empty(), "a figure needs at least one sample");
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        Stats {
            // The upper median, as `simpler bench` has always reported.
            median: v[v.len() / 2],
            p99: rank(&v, 0.99),
            samples: v.len(),
        }
    }

    /// The figures of a rate: `count` things per sample of `seconds` each, as things per
    /// second (median = count ÷ median time, p99 = count ÷ p99 time).
    ///
    /// # Panics
    /// If `seconds` is empty.
    pub fn of_rate(count: f64, seconds: &[f64]) -> Stats {
        let t = Stats::of_times(seconds);
        Stats {
            median: count / t.median,
            p99: count / t.p99,
            samples: t.samples,
        }
    }

    /// True when both figures are finite and above zero.
    pub fn is_positive(&self) -> bool {
        self.median.is_finite() && self.p99.is_finite() && self.median > 0.0 && self.p99 > 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_nearest_rank_p99() {
        let s = Stats::of_times(&[5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.p99, s.samples), (3.0, 5.0, 3));
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        let s = Stats::of_times(&v);
        assert_eq!((s.median, s.p99), (101.0, 198.0));
        let one = Stats::of_times(&[7.0]);
        assert_eq!((one.median, one.p99), (7.0, 7.0));
    }

    #[test]
    fn a_rate_takes_its_tail_from_the_slow_samples() {
        let s = Stats::of_rate(10.0, &[1.0, 2.0, 4.0]);
        assert_eq!((s.median, s.p99), (5.0, 2.5));
        assert!(s.p99 <= s.median);
        assert!(s.is_positive());
        assert!(!Stats::of_rate(0.0, &[1.0]).is_positive());
    }
}
