//! The AICPU↔AICore register protocol (`docs/chip-runtime.md` §10).
//!
//! DATA_MAIN_BASE (DMB, AICPU → core) carries a per-core dispatch id in
//! `1..DISPATCH_ID_LIMIT`, or [`EXIT_SIGNAL`]. A kernel launch resets it to 0. COND
//! (core → AICPU) carries a state in its high 32 bits and an id in its low 32 bits:
//! READY(epoch) once per launch, then ACK(id) when a dispatch is picked up and FIN(id) (or
//! FIN_ERROR(id) when the kernel reported a fatal code) when it ends, and finally EXITED.

/// DMB value telling the core to leave its loop.
pub const EXIT_SIGNAL: u64 = 0x7FFF_FFF0;
/// Dispatch ids stay below this value (the sentinels live at and above it).
pub const DISPATCH_ID_LIMIT: u32 = 0x7FFF_FFF0;

const READY: u64 = 1 << 32;
const ACK: u64 = 2 << 32;
const FIN: u64 = 3 << 32;
const FIN_ERROR: u64 = 4 << 32;
/// COND value of a core that has left its loop.
pub const EXITED: u64 = 5 << 32;
const FIN_SKIPPED: u64 = 6 << 32;

/// COND value a core writes when it starts executing for the run with `epoch`.
pub const fn ready(epoch: u64) -> u64 {
    READY | (epoch & 0xFFFF_FFFF)
}
/// COND value: dispatch `id` picked up.
pub const fn ack(id: u32) -> u64 {
    ACK | id as u64
}
/// COND value: dispatch `id` finished.
pub const fn fin(id: u32) -> u64 {
    FIN | id as u64
}
/// COND value: dispatch `id` finished and its kernel reported a fatal code.
pub const fn fin_error(id: u32) -> u64 {
    FIN_ERROR | id as u64
}

/// COND value: dispatch `id` was not run because an earlier kernel on the core failed.
pub const fn fin_skipped(id: u32) -> u64 {
    FIN_SKIPPED | id as u64
}

/// What a COND value says about dispatch `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchState {
    /// Not finished (not yet picked up, or running).
    Running,
    /// Finished normally.
    Finished,
    /// Finished; the kernel reported a fatal code.
    Failed,
    /// Answered without running: an earlier dispatch on the core failed.
    Skipped,
}

/// Decodes COND for dispatch `id`.
pub fn dispatch_state(cond: u64, id: u32) -> DispatchState {
    if cond == fin(id) {
        DispatchState::Finished
    } else if cond == fin_error(id) {
        DispatchState::Failed
    } else if cond == fin_skipped(id) {
        DispatchState::Skipped
    } else {
        DispatchState::Running
    }
}

/// The dispatch id after `id`: monotonic, wrapping below the sentinels, never 0, and always
/// of the other parity (a core's two payload buffers and slabs are chosen by it).
pub const fn next_dispatch_id(id: u32) -> u32 {
    if id + 1 >= DISPATCH_ID_LIMIT {
        2 - (id & 1 == 0) as u32
    } else {
        id + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_distinct_and_decode() {
        let id = 77;
        assert_eq!(dispatch_state(fin(id), id), DispatchState::Finished);
        assert_eq!(dispatch_state(fin_error(id), id), DispatchState::Failed);
        assert_eq!(dispatch_state(fin_skipped(id), id), DispatchState::Skipped);
        assert_eq!(dispatch_state(ack(id), id), DispatchState::Running);
        assert_eq!(dispatch_state(fin(id - 1), id), DispatchState::Running);
        assert_ne!(ready(id as u64), ack(id));
        assert_eq!(next_dispatch_id(DISPATCH_ID_LIMIT - 1), 2);
        assert_eq!(next_dispatch_id(5), 6);
    }

    #[test]
    fn the_wrap_keeps_alternating_the_payload_buffer() {
        for id in [DISPATCH_ID_LIMIT - 2, DISPATCH_ID_LIMIT - 1] {
            let next = next_dispatch_id(id);
            assert!(next != 0 && next < DISPATCH_ID_LIMIT);
            assert_ne!(next & 1, id & 1, "{id:#x} -> {next:#x}");
        }
    }
}
