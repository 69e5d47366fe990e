//! Run identity: the facts every other piece of the lane is keyed on (`docs/lane.md`
//! §2). A run is named by its epoch (process-unique, never 0), the lane generation that
//! admitted it, its dispatch id (its place in the lane's FIFO) and the pipeline slot it
//! occupies; two identities are equal only when all four agree, so a fact recorded for one
//! run can never be read back for a later run that reuses the slot. Also the names of the two
//! streams of a run ([`StreamRole`], [`StreamPair`]) and of the streams that may hold a wait
//! on a boundary ([`Waiter`]).

use simpler_device::StreamId;

/// Identity of one run (`NativeRunIdentity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunIdentity {
    /// Process-unique, non-zero epoch; stamped into the run's result record.
    pub epoch: u64,
    /// Generation of the lane that admitted the run (lane-minted, non-zero).
    pub generation: u64,
    /// Position of the run in its lane's FIFO (strictly increasing per lane).
    pub dispatch_id: u64,
    /// Pipeline slot the run occupies (`< 2`).
    pub slot: u32,
}

/// The two streams of a run, and the two boundaries recorded on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamRole {
    /// The AICore stream; its boundary is `core_done`.
    Aicore = 0,
    /// The AICPU stream; its boundary is `cpu_done`.
    Aicpu = 1,
}

impl StreamRole {
    /// Both roles, AICore first.
    pub const BOTH: [StreamRole; 2] = [StreamRole::Aicore, StreamRole::Aicpu];

    /// Index for per-role arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The other stream.
    pub fn other(self) -> StreamRole {
        match self {
            StreamRole::Aicore => StreamRole::Aicpu,
            StreamRole::Aicpu => StreamRole::Aicore,
        }
    }

    /// Name for messages.
    pub fn name(self) -> &'static str {
        match self {
            StreamRole::Aicore => "AICore",
            StreamRole::Aicpu => "AICPU",
        }
    }
}

/// The lane's two streams, by role: every run of a lane is launched on this pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamPair {
    /// The AICore stream (the `core_done` boundary is recorded on it).
    pub(crate) aicore: StreamId,
    /// The AICPU stream (the `cpu_done` boundary is recorded on it).
    pub(crate) aicpu: StreamId,
}

impl StreamPair {
    /// The stream of `role`.
    pub(crate) fn stream(self, role: StreamRole) -> StreamId {
        match role {
            StreamRole::Aicore => self.aicore,
            StreamRole::Aicpu => self.aicpu,
        }
    }

    /// Both streams, AICPU first (the order a bounded synchronize drains them in).
    pub(crate) fn both(self) -> [StreamId; 2] {
        [self.aicpu, self.aicore]
    }
}

/// The stream that holds a queued wait on a boundary: one of the run's two, or a caller's
/// stream (a borrowed caller waits on `cpu_done` before recording its Tail).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Waiter {
    /// The AICore stream of the lane.
    Aicore = 0,
    /// The AICPU stream of the lane.
    Aicpu = 1,
    /// The caller's stream of a borrowed launch.
    Caller = 2,
}

impl Waiter {
    /// Every waiter.
    pub const ALL: [Waiter; 3] = [Waiter::Aicore, Waiter::Aicpu, Waiter::Caller];

    /// Index for per-waiter arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl From<StreamRole> for Waiter {
    fn from(role: StreamRole) -> Waiter {
        match role {
            StreamRole::Aicore => Waiter::Aicore,
            StreamRole::Aicpu => Waiter::Aicpu,
        }
    }
}
