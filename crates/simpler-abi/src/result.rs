//! The device run result record (`docs/lane.md`, outcome): one per pipeline slot, written by the
//! AICPU kernel at the end of a run and read once by the host.
//!
//! The writer fills every field, then stores the run's epoch into `published` with release
//! ordering; a reader that sees its own epoch there (acquire) sees the rest.

use crate::assert_layout;

/// Bytes of free-form payload (a NUL-padded UTF-8 message) in a [`RunResult`].
pub const RUN_RESULT_PAYLOAD_BYTES: usize = 256;

/// Verdict field of a [`RunResult`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunVerdict {
    /// Nothing published.
    None = 0,
    /// The run completed: the orchestration returned and every task completed.
    Ok = 1,
    /// The run failed with `completion_code`.
    Error = 2,
}

/// Where a [`RunResult::completion_code`] came from.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeSource {
    /// No code.
    None = 0,
    /// The runtime's shared error words (orchestrator or scheduler error).
    Header = 1,
    /// A device thread's return code.
    ThreadRc = 2,
    /// The shutdown path's return code.
    ShutdownRc = 3,
}

/// The run result record, 288 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RunResult {
    /// Epoch of the run that wrote this record; written last. 0 = never published.
    pub published: u64,
    /// Valid bytes of `payload`.
    pub payload_bytes: u32,
    /// [`RunVerdict`] wire value.
    pub verdict: u32,
    /// Error code (negated runtime code as the host reports it); 0 on success.
    pub completion_code: i32,
    /// [`CodeSource`] wire value.
    pub code_source: u32,
    /// Message explaining an error (UTF-8, not NUL-terminated when full).
    pub payload: [u8; RUN_RESULT_PAYLOAD_BYTES],
    /// Tasks the orchestration submitted in the run (kernel-less ones included), whatever
    /// the verdict.
    pub tasks: u64,
}

assert_layout!(
    RunResult,
    size = 288,
    published = 0,
    payload_bytes = 8,
    verdict = 12,
    completion_code = 16,
    code_source = 20,
    payload = 24,
    tasks = 280
);

impl RunResult {
    /// An unpublished record.
    pub const EMPTY: RunResult = RunResult {
        published: 0,
        payload_bytes: 0,
        verdict: RunVerdict::None as u32,
        completion_code: 0,
        code_source: CodeSource::None as u32,
        payload: [0; RUN_RESULT_PAYLOAD_BYTES],
        tasks: 0,
    };

    /// The payload as text (lossy UTF-8, clamped to the buffer).
    pub fn message(&self) -> String {
        let n = (self.payload_bytes as usize).min(RUN_RESULT_PAYLOAD_BYTES);
        String::from_utf8_lossy(&self.payload[..n]).into_owned()
    }
}
