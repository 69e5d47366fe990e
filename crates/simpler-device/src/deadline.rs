//! Deadlines from caller-given timeouts. Owns one rule, used by every wait of the device and
//! the host: a timeout too long to add to the clock (`Duration::MAX`) means "wait as long as
//! it takes", never an overflow panic.

use std::time::{Duration, Instant};

/// The longest a deadline lies ahead: about 136 years, beyond any run, and small enough to
/// add to any `Instant` the process can observe.
const FAR: Duration = Duration::from_secs(u32::MAX as u64);

/// `from + timeout`, or a deadline [`FAR`] ahead of `from` when `timeout` is longer than that
/// (or too long to add): a huge timeout waits without end instead of panicking.
pub fn deadline_from(from: Instant, timeout: Duration) -> Instant {
    from.checked_add(timeout.min(FAR))
        // FAR always fits a clock reading of this process; an hour if it somehow does not.
        .unwrap_or_else(|| from + Duration::from_secs(3600))
}

/// [`deadline_from`] the current instant.
pub fn deadline(timeout: Duration) -> Instant {
    deadline_from(Instant::now(), timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_timeouts_are_far_deadlines_not_panics() {
        let now = Instant::now();
        assert_eq!(
            deadline_from(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        let far = deadline_from(now, Duration::MAX);
        assert!(far >= now + Duration::from_secs(100 * 365 * 24 * 3600));
        assert_eq!(deadline_from(now, Duration::ZERO), now);
    }
}
