//! The mailbox between a parent and one child process: one [`SharedRegion`] holding a
//! control header and two areas, one for the parent's request and one for the child's
//! response (`docs/l3-worker.md` §5).
//!
//! Layout (little-endian, offsets in bytes):
//!
//! | offset | size  | field |
//! |--------|-------|-------|
//! | 0      | 8     | magic `b"SMPLMBOX"` |
//! | 8      | 4     | version ([`VERSION`]) |
//! | 12     | 4     | child state ([`ChildState`]) |
//! | 16     | 4     | request sequence (futex word; the parent bumps it per request) |
//! | 20     | 4     | response sequence (futex word; the child bumps it per response) |
//! | 24     | 8     | request length |
//! | 32     | 8     | response length |
//! | 4096   | 1 MiB | request area |
//! | 4096 + 1 MiB | 1 MiB | response area |
//!
//! One request is outstanding at a time: the parent writes the request area, then bumps the
//! request sequence (release) and wakes it; the child reads the area once it sees the new
//! sequence (acquire), answers in the response area and bumps the response sequence. A
//! request area holds an envelope: byte 0 is 0 for a message inline, 1 for a message staged
//! in a temporary shared region (too big for the area) that the envelope names. Responses
//! are always inline; their writers keep them inside the area.
//!
//! Waits spin briefly, then sleep on the futex in slices of [`WAIT_SLICE`], calling the
//! caller's check between slices (the parent's: is the child still alive). This module owns
//! the layout and the protocol; it never interprets a message.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::memory::{HostMemory, SharedMemoryError, SharedRef, SharedRegion};
use crate::process::sys;

/// The mailbox's first 8 bytes.
const MAGIC: u64 = u64::from_le_bytes(*b"SMPLMBOX");
/// The layout version this build speaks.
pub(crate) const VERSION: u32 = 1;
const HEADER_LEN: usize = 4096;
/// Bytes of each area.
pub(crate) const AREA_LEN: usize = 1 << 20;
/// Bytes of a whole mailbox.
pub(crate) const MAILBOX_LEN: u64 = (HEADER_LEN + 2 * AREA_LEN) as u64;
/// The longest futex sleep between two checks of a waiter's condition.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(20);
/// The futex sleep of an idle child between requests (it has nothing to check: its
/// parent's end ends it through its stdin).
const IDLE_SLICE: Duration = Duration::from_secs(1);
/// Polls of the word before a waiter sleeps.
const SPINS: u32 = 200;

const INLINE: u8 = 0;
const STAGED: u8 = 1;

/// Where a child is in its life, as it publishes it in the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChildState {
    /// Started, not yet able to serve.
    Starting,
    /// Serving requests.
    Ready,
    /// Could not start; the response area holds why.
    Failed,
    /// Shutting down on the parent's request.
    Exiting,
}

impl ChildState {
    fn from_word(w: u32) -> ChildState {
        match w {
            1 => ChildState::Ready,
            2 => ChildState::Failed,
            3 => ChildState::Exiting,
            _ => ChildState::Starting,
        }
    }

    fn word(self) -> u32 {
        match self {
            ChildState::Starting => 0,
            ChildState::Ready => 1,
            ChildState::Failed => 2,
            ChildState::Exiting => 3,
        }
    }
}

#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    state: AtomicU32,
    request_seq: AtomicU32,
    response_seq: AtomicU32,
    request_len: AtomicU64,
    response_len: AtomicU64,
}

#[derive(Clone, Copy)]
enum Area {
    Request,
    Response,
}

/// How a wait ended without the awaited change.
#[derive(Debug)]
pub(crate) enum WaitEnd<E> {
    /// The deadline passed.
    Timeout,
    /// The caller's check failed.
    Check(E),
}

/// One child's mailbox (either side's mapping of it).
pub(crate) struct Mailbox {
    region: SharedRegion,
    /// The parent's pid, on the child's side (to map staged requests).
    parent: Option<u32>,
}

/// A posted request: the response sequence to wait past, and the staging region (if any)
/// that must live until the response is in.
pub(crate) struct Posted {
    pub(crate) seen: u32,
    _staged: Option<SharedRegion>,
}

impl Mailbox {
    /// A new mailbox (the parent's), state STARTING, no request.
    ///
    /// # Errors
    /// The region could not be made.
    pub(crate) fn create(name: &str) -> Result<Mailbox, SharedMemoryError> {
        let region = SharedRegion::new(MAILBOX_LEN, &format!("mailbox-{name}"))?;
        let mailbox = Mailbox {
            region,
            parent: None,
        };
        let h = mailbox.header();
        h.version.store(VERSION, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(mailbox)
    }

    /// The child's mapping of the mailbox its parent `parent` holds as descriptor `fd`
    /// (`len` bytes, as the parent said).
    ///
    /// # Errors
    /// A text naming what is wrong: the length, the mapping, the magic or the version.
    pub(crate) fn open(parent: u32, fd: i32, len: u64) -> Result<Mailbox, String> {
        if len != MAILBOX_LEN {
            return Err(format!(
                "the mailbox is {len} bytes; this build's mailboxes are {MAILBOX_LEN} (parent \
                 and child programs of different builds?)"
            ));
        }
        let region = SharedRegion::map_from_parent(parent, fd, len, 0)
            .map_err(|e| format!("cannot map the mailbox (fd {fd} of pid {parent}): {e}"))?;
        let mailbox = Mailbox {
            region,
            parent: Some(parent),
        };
        let h = mailbox.header();
        let magic = h.magic.load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(format!(
                "fd {fd} of pid {parent} is not a mailbox (magic {magic:#018x})"
            ));
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != VERSION {
            return Err(format!(
                "the mailbox speaks version {version}; this program speaks {VERSION}"
            ));
        }
        Ok(mailbox)
    }

    /// The region (its descriptor is what the child is told).
    pub(crate) fn region(&self) -> &SharedRegion {
        &self.region
    }

    fn header(&self) -> &Header {
        // SAFETY: the region is page-aligned and at least HEADER_LEN bytes, mapped as long as
        // `self` lives; `Header` is atomics only, valid for any bit pattern (zero included),
        // and every access to it, from either process, is atomic.
        unsafe { &*(self.region.as_ptr() as *const Header) }
    }

    fn area(&self, area: Area) -> *mut u8 {
        let offset = match area {
            Area::Request => HEADER_LEN,
            Area::Response => HEADER_LEN + AREA_LEN,
        };
        // SAFETY: both areas lie inside the region's MAILBOX_LEN bytes.
        unsafe { self.region.as_ptr().add(offset) }
    }

    fn write(&self, area: Area, parts: &[&[u8]]) -> u64 {
        let mut at = 0usize;
        for part in parts {
            assert!(
                at + part.len() <= AREA_LEN,
                "a mailbox message is kept inside its area by its writer"
            );
            // SAFETY: `at + part.len()` is inside the area (asserted); by the protocol the
            // other process does not touch this area until the sequence bump that follows.
            unsafe {
                std::ptr::copy_nonoverlapping(part.as_ptr(), self.area(area).add(at), part.len())
            };
            at += part.len();
        }
        at as u64
    }

    fn read(&self, area: Area, len: u64) -> Result<Vec<u8>, String> {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > AREA_LEN {
            return Err(format!(
                "the mailbox names a message of {len} bytes, more than its area"
            ));
        }
        // SAFETY: `len` bytes from the area's start are inside the area; by the protocol the
        // writer finished them before the sequence bump this reader saw.
        Ok(unsafe { std::slice::from_raw_parts(self.area(area), len) }.to_vec())
    }

    /// The child's state.
    pub(crate) fn state(&self) -> ChildState {
        ChildState::from_word(self.header().state.load(Ordering::Acquire))
    }

    /// Publishes the child's state.
    pub(crate) fn set_state(&self, state: ChildState) {
        self.header().state.store(state.word(), Ordering::Release);
    }

    /// Parent: posts `message` as the next request, staged in a temporary region when it
    /// does not fit the area.
    ///
    /// # Errors
    /// The staging region could not be made.
    pub(crate) fn post_request(&self, message: &[u8]) -> Result<Posted, SharedMemoryError> {
        let h = self.header();
        let seen = h.response_seq.load(Ordering::Acquire);
        let staged = if message.len() < AREA_LEN {
            let len = self.write(Area::Request, &[&[INLINE], message]);
            h.request_len.store(len, Ordering::Relaxed);
            None
        } else {
            let region = SharedRegion::new(message.len() as u64, "staged-request")?;
            // SAFETY: the fresh region holds `message.len()` writable bytes nobody else uses.
            unsafe {
                std::ptr::copy_nonoverlapping(message.as_ptr(), region.as_ptr(), message.len())
            };
            let named = postcard::to_allocvec(&region.shared().expect("a region is shared"))
                .expect("a SharedRef encodes");
            let len = self.write(Area::Request, &[&[STAGED], &named]);
            h.request_len.store(len, Ordering::Relaxed);
            Some(region)
        };
        h.request_seq.fetch_add(1, Ordering::Release);
        sys::futex_wake(&h.request_seq);
        Ok(Posted {
            seen,
            _staged: staged,
        })
    }

    /// Parent: waits for the response to `posted`, until `deadline` (`None`: no limit),
    /// calling `check` between slices; then reads it.
    ///
    /// # Errors
    /// [`WaitEnd`]: the deadline passed or `check` failed; a malformed length is reported
    /// as `Check(bad(text))`.
    pub(crate) fn wait_response<E>(
        &self,
        posted: &Posted,
        deadline: Option<Instant>,
        check: impl FnMut() -> Result<(), E>,
        bad: impl FnOnce(String) -> E,
    ) -> Result<Vec<u8>, WaitEnd<E>> {
        let h = self.header();
        wait_change(&h.response_seq, posted.seen, deadline, WAIT_SLICE, check)?;
        let len = h.response_len.load(Ordering::Relaxed);
        self.read(Area::Response, len)
            .map_err(|e| WaitEnd::Check(bad(e)))
    }

    /// Child: waits for the request after sequence `seen` (no limit), returns its sequence
    /// and its message (unstaged).
    ///
    /// # Errors
    /// A malformed envelope or a staged region that cannot be mapped, as text.
    pub(crate) fn wait_request(&self, seen: u32) -> Result<(u32, Vec<u8>), String> {
        let h = self.header();
        let idle = || Ok::<(), String>(());
        let seq = match wait_change(&h.request_seq, seen, None, IDLE_SLICE, idle) {
            Ok(seq) => seq,
            Err(WaitEnd::Check(e)) => return Err(e),
            Err(WaitEnd::Timeout) => unreachable!("a wait without a deadline"),
        };
        let envelope = self.read(Area::Request, h.request_len.load(Ordering::Relaxed))?;
        let message = match envelope.split_first() {
            Some((&INLINE, message)) => message.to_vec(),
            Some((&STAGED, named)) => self.unstage(named)?,
            _ => return Err("the mailbox holds a request without an envelope".into()),
        };
        Ok((seq, message))
    }

    fn unstage(&self, named: &[u8]) -> Result<Vec<u8>, String> {
        let r: SharedRef = postcard::from_bytes(named)
            .map_err(|e| format!("a staged request's name does not decode: {e}"))?;
        let parent = self.parent.ok_or("only a child reads requests")?;
        let region = SharedRegion::map_from_parent(parent, r.fd, r.region_len, r.region)
            .map_err(|e| format!("cannot map a staged request: {e}"))?;
        let len = usize::try_from(r.len)
            .unwrap_or(usize::MAX)
            .min(region.len());
        // SAFETY: the mapping holds `region.len() >= len` bytes; the parent keeps the region
        // unchanged until the response.
        Ok(unsafe { std::slice::from_raw_parts(region.as_ptr(), len) }.to_vec())
    }

    /// Child: posts `message` (at most [`AREA_LEN`] bytes: the writer keeps it so) as the
    /// response to the request it read.
    pub(crate) fn post_response(&self, message: &[u8]) {
        let h = self.header();
        let len = self.write(Area::Response, &[message]);
        h.response_len.store(len, Ordering::Relaxed);
        h.response_seq.fetch_add(1, Ordering::Release);
        sys::futex_wake(&h.response_seq);
    }
}

/// Waits until `word` differs from `seen`, spinning, then sleeping in slices of `slice`;
/// returns the new value.
fn wait_change<E>(
    word: &AtomicU32,
    seen: u32,
    deadline: Option<Instant>,
    slice: Duration,
    mut check: impl FnMut() -> Result<(), E>,
) -> Result<u32, WaitEnd<E>> {
    for _ in 0..SPINS {
        let now = word.load(Ordering::Acquire);
        if now != seen {
            return Ok(now);
        }
        std::hint::spin_loop();
    }
    loop {
        let slice = match deadline {
            None => slice,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(WaitEnd::Timeout);
                }
                left.min(slice)
            }
        };
        sys::futex_wait(word, seen, slice);
        let now = word.load(Ordering::Acquire);
        if now != seen {
            return Ok(now);
        }
        check().map_err(WaitEnd::Check)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child_of(parent: &Mailbox) -> Mailbox {
        Mailbox::open(std::process::id(), parent.region().fd(), MAILBOX_LEN).unwrap()
    }

    #[test]
    fn a_request_and_its_response_cross_both_mappings() {
        let parent = Mailbox::create("test").unwrap();
        let child = child_of(&parent);
        assert_eq!(child.state(), ChildState::Starting);
        let server = std::thread::spawn(move || {
            let mut seen = 0;
            for _ in 0..2 {
                let (seq, message) = child.wait_request(seen).unwrap();
                seen = seq;
                child.set_state(ChildState::Ready);
                let mut reply = message.clone();
                reply.truncate(16);
                reply.push(message.len() as u8);
                child.post_response(&reply);
            }
        });
        let posted = parent.post_request(b"hello").unwrap();
        let reply = parent
            .wait_response(&posted, None, || Ok::<(), String>(()), |e| e)
            .unwrap();
        assert_eq!(reply, b"hello\x05");
        assert_eq!(parent.state(), ChildState::Ready);

        // Bigger than the area: staged in a temporary region.
        let big: Vec<u8> = (0..AREA_LEN + 10).map(|i| (i % 251) as u8).collect();
        let posted = parent.post_request(&big).unwrap();
        let reply = parent
            .wait_response(&posted, None, || Ok::<(), String>(()), |e| e)
            .unwrap();
        assert_eq!(&reply[..16], &big[..16]);
        assert_eq!(reply[16], ((AREA_LEN + 10) % 256) as u8);
        server.join().unwrap();
    }

    #[test]
    fn a_wait_ends_by_its_deadline_or_its_check() {
        let parent = Mailbox::create("test").unwrap();
        let posted = parent.post_request(b"x").unwrap();
        let t = Instant::now();
        let end = parent
            .wait_response(
                &posted,
                Some(Instant::now() + Duration::from_millis(60)),
                || Ok::<(), String>(()),
                |e| e,
            )
            .unwrap_err();
        assert!(matches!(end, WaitEnd::Timeout));
        assert!(t.elapsed() >= Duration::from_millis(55));
        let mut checks = 0;
        let end = parent
            .wait_response(
                &posted,
                None,
                || {
                    checks += 1;
                    if checks == 3 {
                        Err("dead")
                    } else {
                        Ok(())
                    }
                },
                |_| "bad",
            )
            .unwrap_err();
        assert!(matches!(end, WaitEnd::Check("dead")));
    }

    #[test]
    fn a_region_that_is_no_mailbox_is_refused() {
        let other = SharedRegion::new(MAILBOX_LEN, "other").unwrap();
        let err = Mailbox::open(std::process::id(), other.fd(), MAILBOX_LEN)
            .err()
            .unwrap();
        assert!(err.contains("is not a mailbox"), "{err}");
        let err = Mailbox::open(std::process::id(), other.fd(), 4096)
            .err()
            .unwrap();
        assert!(err.contains("4096 bytes"), "{err}");
    }
}
