//! The clocks a trace is stamped with (`docs/tracing.md`, Capture): the host clock
//! ([`monotonic_ns`], `CLOCK_MONOTONIC`) and, on the sim platform, the device clock, which is
//! the host clock less a per-device origin ([`device_ns`]) so that device timestamps live in
//! their own domain as on hardware, where they come from the chip's system counter.
//! It owns no state; callers keep the origin.

/// The host's `CLOCK_MONOTONIC`, in nanoseconds. About 20 ns (a vDSO call).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always available on
    // Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The sim device clock: nanoseconds since `origin_ns`, a [`monotonic_ns`] reading the host
/// picked for the device (saturating at 0 for a reading before the origin).
pub fn device_ns(origin_ns: u64) -> u64 {
    monotonic_ns().saturating_sub(origin_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_clock_is_the_host_clock_shifted_by_its_origin() {
        let a = monotonic_ns();
        let d = device_ns(a);
        let b = monotonic_ns();
        assert!(a <= b);
        assert!(d <= b - a, "device time counts from the origin");
        assert!(device_ns(u64::MAX) == 0);
    }
}
