//! `simpler bench --peer`: the figures of `simpler_bench::peer` — the independent and chain
//! no-op shapes on our sim and on rayon, interleaved in this process — as a table of tasks/s
//! with ours ÷ rayon beside its target, or the whole report as JSON. It reports figures; the
//! target is printed, never enforced.

use simpler_bench::peer::{peer_bench, PeerBenchError, PeerParams, INDEPENDENT_RATIO_TARGET};

use super::executor::num;

/// `value / rayon` with its target (`None`: no target) and the verdict.
fn target(ratio: f64, bound: Option<f64>) -> String {
    match bound {
        Some(b) if ratio >= b => format!(">= {:.0}% met", b * 100.0),
        Some(b) => format!(">= {:.0}% MISSED", b * 100.0),
        None => "—".to_string(),
    }
}

/// Runs the bench and prints it.
///
/// # Errors
/// A zero `tasks` or `runs`; our worker's or a run's [`simpler_host::HostError`] as itself
/// (so a refused configuration keeps its exit code); rayon's pool failing to start.
pub(crate) fn command(tasks: u64, runs: u32, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    super::at_least_one(tasks, runs)?;
    let r = peer_bench(PeerParams { tasks, runs }).map_err(|e| -> Box<dyn std::error::Error> {
        match e {
            PeerBenchError::Host(h) => Box::new(h),
            other => Box::new(other),
        }
    })?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    outln!(
        "simpler bench --peer: {tasks} no-op tasks per run, median of {runs} rounds after a \
         warm-up, the four measurements interleaved; ours: {} cores, {} AICPU threads, {} \
         executor ({} pool threads); rayon: one scope on a pool of {} threads",
        r.ours.cores,
        r.ours.aicpu_threads,
        r.ours.executor,
        r.ours.pool_threads,
        r.rayon.threads
    );
    outln!(
        "{:<12} {:>16} {:>16} {:>13}  target",
        "shape",
        "ours (tasks/s)",
        "rayon (tasks/s)",
        "ours / rayon"
    );
    for (shape, ours, rayon, ratio, bound) in [
        (
            "independent",
            r.ours.independent_tasks_per_s,
            r.rayon.independent_tasks_per_s,
            r.independent_ratio,
            Some(INDEPENDENT_RATIO_TARGET),
        ),
        (
            "chain",
            r.ours.chain_tasks_per_s,
            r.rayon.chain_tasks_per_s,
            r.chain_ratio,
            None,
        ),
    ] {
        outln!(
            "{shape:<12} {:>16} {:>16} {:>13}  {}",
            num(ours),
            num(rayon),
            format!("{:.2}%", ratio * 100.0),
            target(ratio, bound)
        );
    }
    outln!(
        "ours: tasks / the run's round trip (submit to result) on the sim; rayon independent: \
         rayon::scope spawning every task; rayon chain: each task spawned by its predecessor \
         inside one scope; tasks / the scope's time."
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_column_says_met_missed_or_none() {
        assert_eq!(target(0.3, Some(0.25)), ">= 25% met");
        assert_eq!(target(0.1, Some(0.25)), ">= 25% MISSED");
        assert_eq!(target(0.1, None), "—");
    }
}
