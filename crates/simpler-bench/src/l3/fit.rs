//! The arithmetic of the level-3 sweep: a figure's median and slow tail ([`Spread`]), and
//! the least-squares line `run_us = fixed + per_task × k` through the per-k medians
//! ([`fit_line`]). Pure arithmetic; this module measures nothing.

use serde::Serialize;

use crate::executor::stats::rank;

/// The median and 90th percentile of one figure's samples (µs).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// The median sample (the upper median for an even count, as `simpler bench` reports).
    pub median: f64,
    /// The 90th-percentile sample by nearest rank (the slowest with fewer than 10 samples).
    pub p90: f64,
    /// Samples the figure is taken over.
    pub samples: usize,
}

impl Spread {
    /// The spread of `samples` (any unit).
    ///
    /// # Panics
    /// If `samples` is empty (every point of the sweep takes at least one sample).
    pub fn of(samples: &[f64]) -> Spread {
        assert!(!samples.is_empty(), "a figure needs at least one sample");
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        Spread {
            median: v[v.len() / 2],
            p90: rank(&v, 0.9),
            samples: v.len(),
        }
    }
}

/// A straight line `run_us = fixed_us + per_task_us × k`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Fit {
    /// The line at k = 0, µs per run.
    pub fixed_us: f64,
    /// The slope, µs per task.
    pub per_task_us: f64,
}

impl Fit {
    /// The line's value at `k` tasks, µs.
    pub fn at(&self, k: f64) -> f64 {
        self.fixed_us + self.per_task_us * k
    }
}

/// The ordinary least-squares line through `points` (`(k, run_us)`), or `None` when it is
/// not determined: fewer than two points, or every `k` the same.
pub fn fit_line(points: &[(f64, f64)]) -> Option<Fit> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mean_k = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_t = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_k).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_k) * (p.1 - mean_t)).sum();
    // Equal ks (relative to their size) leave the slope undetermined.
    if sxx <= f64::EPSILON * mean_k.abs().max(1.0) {
        return None;
    }
    let per_task_us = sxy / sxx;
    Some(Fit {
        fixed_us: mean_t - per_task_us * mean_k,
        per_task_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn an_exact_line_is_recovered() {
        let ks = [1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0];
        let points: Vec<(f64, f64)> = ks.iter().map(|&k| (k, 43.3 + 8.08 * k)).collect();
        let f = fit_line(&points).unwrap();
        assert!(close(f.fixed_us, 43.3), "{f:?}");
        assert!(close(f.per_task_us, 8.08), "{f:?}");
        assert!(close(f.at(10.0), 43.3 + 80.8), "{f:?}");
    }

    #[test]
    fn symmetric_noise_leaves_the_line_where_it_was() {
        // Residuals +e, -e at each k cancel in both sums, whatever e is.
        let mut points = Vec::new();
        for (k, e) in [(1.0, 5.0), (4.0, 2.0), (16.0, 9.0), (64.0, 30.0)] {
            points.push((k, 10.0 + 2.0 * k + e));
            points.push((k, 10.0 + 2.0 * k - e));
        }
        let f = fit_line(&points).unwrap();
        assert!(
            close(f.fixed_us, 10.0) && close(f.per_task_us, 2.0),
            "{f:?}"
        );
    }

    #[test]
    fn the_fit_minimizes_squared_residuals() {
        // Points off any line: the least-squares answer, worked by hand.
        // k = 0, 1, 2; t = 0, 2, 1: mean k = 1, mean t = 1, sxx = 2, sxy = 1.
        let f = fit_line(&[(0.0, 0.0), (1.0, 2.0), (2.0, 1.0)]).unwrap();
        assert!(close(f.per_task_us, 0.5) && close(f.fixed_us, 0.5), "{f:?}");
        let sse = |a: f64, b: f64| {
            [(0.0, 0.0), (1.0, 2.0), (2.0, 1.0)]
                .iter()
                .map(|(k, t)| (t - a - b * k).powi(2))
                .sum::<f64>()
        };
        let best = sse(f.fixed_us, f.per_task_us);
        for (da, db) in [(0.01, 0.0), (-0.01, 0.0), (0.0, 0.01), (0.0, -0.01)] {
            assert!(sse(f.fixed_us + da, f.per_task_us + db) > best);
        }
    }

    #[test]
    fn an_undetermined_line_is_none() {
        assert_eq!(fit_line(&[]), None);
        assert_eq!(fit_line(&[(1.0, 3.0)]), None);
        assert_eq!(fit_line(&[(4.0, 3.0), (4.0, 5.0)]), None);
        assert!(fit_line(&[(1.0, 3.0), (2.0, 5.0)]).is_some());
    }

    #[test]
    fn the_spread_takes_the_median_and_the_nearest_rank_p90() {
        let s = Spread::of(&[5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.p90, s.samples), (3.0, 5.0, 3));
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Spread::of(&v);
        assert_eq!((s.median, s.p90), (51.0, 90.0));
    }
}
