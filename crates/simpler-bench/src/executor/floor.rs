//! The floor every round trip is compared with: two bare OS threads passing a turn back and
//! forth with `std::thread::park`/`unpark`, the cheapest wake-up and reply the OS offers
//! one thread to another. Touches no device and no worker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::{ExecutorBenchError, Stats};

/// Round trips timed before the measured ones (both threads reach their steady state).
const WARM_UP: u64 = 16;

/// Times `samples` park/unpark round trips between this thread and a peer, each one
/// separately, in microseconds: this thread hands the turn to the peer and unparks it, the
/// peer hands it back and unparks this thread.
///
/// # Errors
/// [`ExecutorBenchError::Spawn`] when the peer thread cannot be started.
///
/// # Panics
/// If `samples` is 0.
pub fn park_round_trip_us(samples: usize) -> Result<Stats, ExecutorBenchError> {
    assert!(samples > 0, "the floor needs at least one sample");
    // Odd: the peer's turn; even: this thread's; u64::MAX: the peer stops.
    let turn = AtomicU64::new(0);
    let me = std::thread::current();
    let mut times = Vec::with_capacity(samples);
    std::thread::scope(|s| -> Result<(), ExecutorBenchError> {
        let peer = std::thread::Builder::new()
            .name("bench-floor-peer".into())
            .spawn_scoped(s, || loop {
                let t = turn.load(Ordering::Acquire);
                if t == u64::MAX {
                    return;
                }
                if t % 2 == 1 {
                    turn.store(t + 1, Ordering::Release);
                    me.unpark();
                } else {
                    std::thread::park();
                }
            })
            .map_err(ExecutorBenchError::Spawn)?;
        for i in 0..WARM_UP + samples as u64 {
            let start = Instant::now();
            turn.store(2 * i + 1, Ordering::Release);
            peer.thread().unpark();
            while turn.load(Ordering::Acquire) != 2 * i + 2 {
                std::thread::park();
            }
            if i >= WARM_UP {
                times.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        turn.store(u64::MAX, Ordering::Release);
        peer.thread().unpark();
        Ok(())
    })?;
    Ok(Stats::of_times(&times))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_a_positive_time_per_sample() {
        let s = park_round_trip_us(20).unwrap();
        assert_eq!(s.samples, 20);
        assert!(s.is_positive() && s.p99 >= s.median, "{s:?}");
    }
}
