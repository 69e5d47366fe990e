//! The L3↔L2 message queue (`docs/comm.md` §8): two single-producer single-consumer queues
//! — input (host → chip) and output (chip → host) — of descriptor rings and byte arenas on
//! one worker-chip region. This module owns the host's half: the layout's checks and header,
//! producing input messages and consuming output ones. The chip's half is
//! `simpler/queue.h`, to the same layout; the region's life is `crate::channel`'s.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::channel::{create, poll_until, WorkerChipRegion};
use crate::engine::Engine;
use crate::WorkerError;

/// Header magic (`SQUE`).
pub const QUEUE_MAGIC: u32 = 0x4555_5153;
/// Layout version.
pub const QUEUE_VERSION: u32 = 1;
/// Bytes of a ring slot.
pub const SLOT_BYTES: u64 = 32;
/// Bytes of the header.
pub const HEADER_BYTES: u64 = 64;
/// Most slots of a ring.
pub const MAX_DEPTH: u32 = 1 << 30;
/// Counter bytes of a queue's region: six 64-byte lines.
pub const COUNTER_BYTES: u64 = 384;

const IN_TAIL: u64 = 0;
const IN_HEAD: u64 = 64;
const OUT_TAIL: u64 = 128;
const OUT_HEAD: u64 = 192;
const HOST_ABORT: u64 = 256;
const CHIP_ABORT: u64 = 320;

/// What a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// Data for the other side.
    Data = 1,
    /// The end of the input: the chip's loop ends (input only).
    Stop = 2,
    /// An error report; the payload is its text.
    Error = 3,
}

impl Opcode {
    fn from_raw(v: u32) -> Option<Opcode> {
        Some(match v {
            1 => Opcode::Data,
            2 => Opcode::Stop,
            3 => Opcode::Error,
            _ => return None,
        })
    }
}

/// A message taken from the output queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMessage {
    /// Its opcode.
    pub opcode: Opcode,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// A queue's slot, as in `docs/comm.md` §8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    seq: u64,
    opcode: u32,
    reserved: u32,
    payload_offset: u64,
    payload_nbytes: u64,
}

/// One direction's place in the payload.
#[derive(Clone, Copy, Debug)]
struct Ring {
    ring: u64,
    arena: u64,
    arena_bytes: u64,
    tail: u64,
    head: u64,
}

/// The host's end of a message queue (see the module docs). `Clone`; valid as long as its
/// region ([`region`](WorkerChipQueue::region)).
#[derive(Clone, Debug)]
pub struct WorkerChipQueue {
    region: WorkerChipRegion,
    depth: u32,
    input: Ring,
    output: Ring,
}

fn bad(arg: &str, reason: String) -> WorkerError {
    WorkerError::InvalidArgument {
        arg: arg.into(),
        reason,
    }
}

fn round64(n: u64) -> u64 {
    n.next_multiple_of(64)
}

/// Makes a queue on chip `worker` for run `run` (see
/// `Orchestrator::create_worker_chip_queue`).
pub(crate) fn create_queue(
    engine: &Engine,
    run: u64,
    worker: usize,
    depth: u64,
    input_arena_bytes: u64,
    output_arena_bytes: u64,
) -> Result<WorkerChipQueue, WorkerError> {
    if depth == 0 || !depth.is_power_of_two() || depth > u64::from(MAX_DEPTH) {
        return Err(bad(
            "depth",
            format!("{depth} is not a power of two from 1 to 2^30"),
        ));
    }
    for (name, n) in [
        ("input_arena_bytes", input_arena_bytes),
        ("output_arena_bytes", output_arena_bytes),
    ] {
        if n == 0 || !n.is_multiple_of(64) || n > crate::channel::MAX_REGION_PART {
            return Err(bad(
                name,
                format!("{n} is not a positive multiple of 64 up to 1 GiB"),
            ));
        }
    }
    let in_ring = HEADER_BYTES;
    let out_ring = in_ring + SLOT_BYTES * depth;
    let in_arena = out_ring + SLOT_BYTES * depth;
    let out_arena = in_arena + input_arena_bytes;
    let payload = out_arena + output_arena_bytes;
    if payload > crate::channel::MAX_REGION_PART {
        return Err(bad(
            "depth",
            format!("the queue needs {payload} bytes of payload, above the 1 GiB of a region"),
        ));
    }
    let region = create(engine, run, worker, payload, COUNTER_BYTES)?;
    let header: [u64; 8] = [
        u64::from(QUEUE_MAGIC) | (u64::from(QUEUE_VERSION) << 32),
        depth,
        input_arena_bytes,
        output_arena_bytes,
        in_ring,
        out_ring,
        in_arena,
        out_arena,
    ];
    // SAFETY: the payload holds at least the 64-byte header at its page-aligned start; no
    // chip task has the descriptor yet. (Little-endian: u32 magic, u32 version, u32 depth,
    // u32 0, then the six u64 fields, as docs/comm.md §8.)
    unsafe { std::ptr::copy_nonoverlapping(header.as_ptr(), region.payload_ptr() as *mut u64, 8) };
    Ok(WorkerChipQueue {
        region,
        depth: depth as u32,
        input: Ring {
            ring: in_ring,
            arena: in_arena,
            arena_bytes: input_arena_bytes,
            tail: IN_TAIL,
            head: IN_HEAD,
        },
        output: Ring {
            ring: out_ring,
            arena: out_arena,
            arena_bytes: output_arena_bytes,
            tail: OUT_TAIL,
            head: OUT_HEAD,
        },
    })
}

/// Polls `ready` until it answers `Some`, the chip aborts, or `timeout` passes.
fn poll<T>(
    chip_abort: &AtomicU32,
    timeout: Duration,
    mut ready: impl FnMut() -> Result<Option<T>, WorkerError>,
) -> Result<T, WorkerError> {
    poll_until(timeout, || {
        if let Some(v) = ready()? {
            return Ok(Some(v));
        }
        if chip_abort.load(Ordering::Acquire) != 0 {
            return Err(WorkerError::InvalidState(
                "the chip task gave up on this queue (it set its abort counter); its task's \
                 error says why"
                    .into(),
            ));
        }
        Ok(None)
    })
}

impl WorkerChipQueue {
    /// The region the queue lives on: pass `region().descriptor().words()` to the chip task.
    pub fn region(&self) -> &WorkerChipRegion {
        &self.region
    }

    /// Slots of each ring.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Bytes of the input and the output arena.
    pub fn arena_bytes(&self) -> (u64, u64) {
        (self.input.arena_bytes, self.output.arena_bytes)
    }

    fn slot_ptr(&self, ring: &Ring, seq: u32) -> *mut Slot {
        let index = u64::from(seq) % u64::from(self.depth);
        // SAFETY: the ring lies inside the payload (`create_queue` laid it out), slots are
        // 32-byte aligned (the payload is page aligned, the ring at 64 + k·32).
        unsafe {
            self.region
                .payload_ptr()
                .add((ring.ring + index * SLOT_BYTES) as usize) as *mut Slot
        }
    }

    fn read_slot(&self, ring: &Ring, seq: u32) -> Slot {
        // SAFETY: `slot_ptr` is in bounds and aligned; its writer published it before the
        // tail counter this side read (acquire), and does not touch it until released.
        unsafe { std::ptr::read_volatile(self.slot_ptr(ring, seq)) }
    }

    /// Sends one `DATA` message of `data`, waiting up to `timeout` for a free slot and
    /// arena room.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`data`) for more bytes than the input arena;
    /// [`WorkerError::WaitTimeout`]; [`WorkerError::InvalidState`] once the region is freed
    /// or the chip aborted.
    pub fn send(&self, data: &[u8], timeout: Duration) -> Result<(), WorkerError> {
        self.send_op(Opcode::Data, data, timeout)
    }

    /// Sends `STOP`: the chip's loop ends once it takes it.
    ///
    /// # Errors
    /// As [`send`](WorkerChipQueue::send).
    pub fn stop(&self, timeout: Duration) -> Result<(), WorkerError> {
        self.send_op(Opcode::Stop, &[], timeout)
    }

    /// Sends one message with `opcode`.
    ///
    /// # Errors
    /// As [`send`](WorkerChipQueue::send).
    pub fn send_op(
        &self,
        opcode: Opcode,
        data: &[u8],
        timeout: Duration,
    ) -> Result<(), WorkerError> {
        let ring = self.input;
        let n = data.len() as u64;
        if n > ring.arena_bytes {
            return Err(bad(
                "data",
                format!(
                    "{n} bytes do not fit the {}-byte input arena",
                    ring.arena_bytes
                ),
            ));
        }
        let tail_c = self.region.counter_word("send", ring.tail)?;
        let head_c = self.region.counter_word("send", ring.head)?;
        let abort = self.region.counter_word("send", CHIP_ABORT)?;
        let tail = tail_c.load(Ordering::Acquire);
        let at = poll(abort, timeout, || {
            self.region.counter_word("send", ring.tail)?; // still open
            let head = head_c.load(Ordering::Acquire);
            Ok(self.room(&ring, tail, head, n))
        })?;
        // SAFETY: `room` found `[at, at + n)` inside the arena and free of every
        // unreleased message; the chip reads it only after the tail moves (release).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.region.payload_ptr().add((ring.arena + at) as usize),
                data.len(),
            );
            std::ptr::write_volatile(
                self.slot_ptr(&ring, tail),
                Slot {
                    seq: u64::from(tail),
                    opcode: opcode as u32,
                    reserved: 0,
                    payload_offset: at,
                    payload_nbytes: n,
                },
            );
        }
        tail_c.store(tail.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Where a message of `n` bytes goes in `ring`'s arena with `tail` produced and `head`
    /// released, if there is a slot and room.
    fn room(&self, ring: &Ring, tail: u32, head: u32, n: u64) -> Option<u64> {
        place(self.depth, ring.arena_bytes, tail, head, n, |seq| {
            self.read_slot(ring, seq)
        })
    }

    /// Takes the next output message, waiting up to `timeout`, and releases it.
    ///
    /// # Errors
    /// [`WorkerError::WaitTimeout`]; [`WorkerError::InvalidState`] once the region is freed,
    /// the chip aborted, or the chip wrote a slot that breaks the layout.
    pub fn recv(&self, timeout: Duration) -> Result<QueueMessage, WorkerError> {
        let ring = self.output;
        let tail_c = self.region.counter_word("recv", ring.tail)?;
        let head_c = self.region.counter_word("recv", ring.head)?;
        let abort = self.region.counter_word("recv", CHIP_ABORT)?;
        let head = head_c.load(Ordering::Acquire);
        poll(abort, timeout, || {
            self.region.counter_word("recv", ring.tail)?;
            Ok((tail_c.load(Ordering::Acquire) != head).then_some(()))
        })?;
        let slot = self.read_slot(&ring, head);
        let broken = |why: &str| {
            WorkerError::InvalidState(format!(
                "output message {head} breaks the queue layout: {why}"
            ))
        };
        let opcode = Opcode::from_raw(slot.opcode).ok_or_else(|| broken("unknown opcode"))?;
        let end = slot.payload_offset.checked_add(slot.payload_nbytes);
        if end.is_none_or(|e| e > ring.arena_bytes) {
            return Err(broken("its bytes lie outside the output arena"));
        }
        let mut data = vec![0u8; slot.payload_nbytes as usize];
        // SAFETY: the span lies inside the arena (checked); the chip wrote it before the
        // tail counter (acquired above) and leaves it until the head moves.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.region
                    .payload_ptr()
                    .add((ring.arena + slot.payload_offset) as usize),
                data.as_mut_ptr(),
                data.len(),
            );
        }
        head_c.store(head.wrapping_add(1), Ordering::Release);
        Ok(QueueMessage { opcode, data })
    }

    /// Gives the queue up: sets the host abort counter (a chip task still waiting on it
    /// fails promptly) and frees the region. Idempotent.
    pub fn free(&self) {
        if let Ok(c) = self.region.counter_word("free", HOST_ABORT) {
            c.store(1, Ordering::Release);
        }
        self.region.free();
    }
}

/// Where a producer puts a message of `n` bytes in an arena of `arena` bytes of a ring of
/// `depth` slots with `tail` produced and `head` released, `slot(seq)` reading the slot of
/// message `seq`; `None` when no slot or no room is free (`docs/comm.md` §8).
fn place(
    depth: u32,
    arena: u64,
    tail: u32,
    head: u32,
    n: u64,
    slot: impl Fn(u32) -> Slot,
) -> Option<u64> {
    let used = tail.wrapping_sub(head);
    if used >= depth {
        return None;
    }
    if used == 0 {
        return Some(0);
    }
    let last = slot(tail.wrapping_sub(1));
    let w = last.payload_offset + round64(last.payload_nbytes);
    if n == 0 {
        return Some(w.min(arena));
    }
    let size = round64(n);
    // The occupied bytes start at the oldest unreleased message that has any; with none,
    // the arena is free (only zero-byte messages are unreleased).
    let oldest = (0..used)
        .map(|k| slot(head.wrapping_add(k)))
        .find(|s| s.payload_nbytes != 0)
        .map(|s| s.payload_offset);
    let fits_at_w = w + size <= arena;
    match oldest {
        None => Some(if fits_at_w { w } else { 0 }),
        Some(o) if w > o => {
            if fits_at_w {
                Some(w)
            } else if size <= o {
                Some(0)
            } else {
                None
            }
        }
        Some(o) if w < o => (w + size <= o).then_some(w),
        // `w == o` with bytes unreleased: the ring of bytes is full.
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(msgs: &[(u64, u64)]) -> impl Fn(u32) -> Slot + '_ {
        move |seq| {
            let (payload_offset, payload_nbytes) = msgs[seq as usize];
            Slot {
                seq: u64::from(seq),
                payload_offset,
                payload_nbytes,
                ..Slot::default()
            }
        }
    }

    #[test]
    fn a_full_byte_ring_is_not_taken_for_an_empty_one() {
        // 128-byte arena: A at 0, B at 64; A released; C wraps to 0 (w = 64 = B's offset).
        let msgs = [(0, 64), (64, 64), (0, 64)];
        // With B and C unreleased, D has no room (it would overwrite B).
        assert_eq!(place(4, 128, 3, 1, 64, slots(&msgs)), None);
        // Once B is released, D goes after C.
        assert_eq!(place(4, 128, 3, 2, 64, slots(&msgs)), Some(64));
    }

    #[test]
    fn placement_wraps_without_splitting_and_respects_slots() {
        let msgs = [(0, 100), (128, 100)];
        // w = 256 of 300: 64 bytes do not fit before the end; 0 is free only once A is gone.
        assert_eq!(place(4, 300, 2, 0, 64, slots(&msgs)), None);
        assert_eq!(place(4, 300, 2, 1, 64, slots(&msgs)), Some(0));
        assert_eq!(
            place(2, 300, 2, 0, 1, slots(&msgs)),
            None,
            "both slots are taken"
        );
        assert_eq!(
            place(4, 300, 2, 2, 300, slots(&msgs)),
            Some(0),
            "empty: from 0"
        );
        // Only zero-byte messages unreleased: the arena is free.
        let zeros = [(64, 0), (64, 0)];
        assert_eq!(place(4, 128, 2, 0, 64, slots(&zeros)), Some(64));
        assert_eq!(place(4, 128, 2, 0, 128, slots(&zeros)), Some(0));
    }

    #[test]
    fn a_slot_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Slot>() as u64, SLOT_BYTES);
        assert_eq!(std::mem::offset_of!(Slot, payload_offset), 16);
    }
}
