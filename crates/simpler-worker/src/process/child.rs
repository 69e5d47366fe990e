//! The child's side of a mailbox, shared by every child program (the chip child, a
//! binding's sub worker loop): connecting from the environment the parent set, ending the
//! process when the parent goes, reading requests and posting responses, and mapping the
//! parent's shared regions once each (`docs/l3-worker.md` §5).
//!
//! It owns the child's mappings of the parent's memory; what a request means is the chip
//! server's or the binding's.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use crate::memory::{HostMemory, SharedRef, SharedRegion};
use crate::process::mailbox::{ChildState, Mailbox, AREA_LEN};
use crate::process::wire::{decode, encode, Request, Response, WireTensor};
use crate::process::wire_error::WireError;
use crate::process::{env, sys};
use crate::tensor::{Memory, Tensor};
use crate::WorkerError;

/// The status a child exits with when its parent is gone (its stdin ended).
pub const EXIT_PARENT_GONE: i32 = 3;

/// Regions kept mapped beyond those the current request uses.
const MAX_CACHED_REGIONS: usize = 64;

/// A child's connection to its parent.
pub(crate) struct Connection {
    mailbox: Mailbox,
    role: String,
    index: usize,
    seen: u32,
    regions: RegionCache,
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| {
        format!(
            "{name} is not set: this program is a simpler child process, started by a simpler \
             parent (a Worker with child processes), not by hand"
        )
    })
}

fn number<T: std::str::FromStr>(name: &str) -> Result<T, String> {
    let text = var(name)?;
    text.parse()
        .map_err(|_| format!("{name}={text:?} is not a number"))
}

impl Connection {
    /// Connects from the environment the parent set (`docs/l3-worker.md` §5): maps the
    /// mailbox and starts the thread that ends this process when its stdin (the parent's
    /// pipe) ends.
    ///
    /// # Errors
    /// A text naming the missing or bad variable, or why the mailbox cannot be mapped.
    pub(crate) fn connect() -> Result<Connection, String> {
        let role = var(env::ROLE)?;
        let index: usize = number(env::INDEX)?;
        let fd: i32 = number(env::MAILBOX_FD)?;
        let len: u64 = number(env::MAILBOX_LEN)?;
        let parent: u32 = number(env::PARENT_PID)?;
        let mailbox = Mailbox::open(parent, fd, len)?;
        std::thread::Builder::new()
            .name("parent watch".into())
            .spawn(watch_parent)
            .map_err(|e| format!("cannot start the thread watching the parent: {e}"))?;
        Ok(Connection {
            mailbox,
            role,
            index,
            seen: 0,
            regions: RegionCache::new(parent),
        })
    }

    /// The role the parent started this child as (`chip`, `sub`).
    pub(crate) fn role(&self) -> &str {
        &self.role
    }

    /// The child's index (chip or sub worker id).
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Publishes the child's state.
    pub(crate) fn set_state(&self, state: ChildState) {
        self.mailbox.set_state(state);
    }

    /// Waits for the next request; one that does not decode is answered with an error and
    /// skipped.
    ///
    /// # Errors
    /// The mailbox broke (a staged request cannot be mapped), as text.
    pub(crate) fn next(&mut self) -> Result<Request, String> {
        loop {
            let (seq, bytes) = self.mailbox.wait_request(self.seen)?;
            self.seen = seq;
            self.regions.begin_request();
            match decode::<Request>(&bytes, "request") {
                Ok(request) => return Ok(request),
                Err(text) => self.respond(&Response::Err(WireError::InvalidState(text))),
            }
        }
    }

    /// Posts `response` to the request last read; one too big for the response area is
    /// replaced by an error saying so.
    pub(crate) fn respond(&mut self, response: &Response) {
        let bytes = encode(response);
        if bytes.len() <= AREA_LEN {
            self.mailbox.post_response(&bytes);
        } else {
            let refusal = Response::Err(WireError::InvalidState(format!(
                "the child's response of {} bytes does not fit the mailbox's {AREA_LEN}",
                bytes.len()
            )));
            self.mailbox.post_response(&encode(&refusal));
        }
    }

    /// The parent's shared regions, as this child maps them.
    pub(crate) fn regions(&mut self) -> &mut RegionCache {
        &mut self.regions
    }

    /// How many of the parent's regions this child maps now.
    pub(crate) fn regions_len(&self) -> usize {
        self.regions.len()
    }
}

fn check_span(r: &SharedRef) -> Result<(), String> {
    let inside = matches!(r.offset.checked_add(r.len), Some(end) if end <= r.region_len);
    if inside {
        Ok(())
    } else {
        Err(format!(
            "its shared span [{}, +{}) lies outside its region of {} bytes",
            r.offset, r.len, r.region_len
        ))
    }
}

/// Blocks on stdin (the parent's pipe) and ends the process at its end.
fn watch_parent() {
    let mut stdin = std::io::stdin();
    let mut buf = [0u8; 256];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    sys::exit_now(EXIT_PARENT_GONE);
}

/// The parent's shared regions mapped in this child, each once, by region id. Regions no
/// request has named lately are unmapped when more than [`MAX_CACHED_REGIONS`] are kept;
/// those the current request uses never are.
pub(crate) struct RegionCache {
    parent: u32,
    regions: HashMap<u64, (Arc<SharedRegion>, u64)>,
    generation: u64,
}

impl RegionCache {
    fn new(parent: u32) -> RegionCache {
        RegionCache {
            parent,
            regions: HashMap::new(),
            generation: 0,
        }
    }

    fn begin_request(&mut self) {
        self.generation += 1;
    }

    /// Regions mapped now.
    pub(crate) fn len(&self) -> usize {
        self.regions.len()
    }

    /// The mapping of `r`'s region, made on first use.
    ///
    /// # Errors
    /// A text: a span outside the region, a length that disagrees with the mapping, or the
    /// parent's descriptor could not be mapped.
    pub(crate) fn map(&mut self, r: &SharedRef) -> Result<Arc<SharedRegion>, String> {
        check_span(r)?;
        let generation = self.generation;
        if let Some((region, used)) = self.regions.get_mut(&r.region) {
            if region.len() as u64 != r.region_len {
                return Err(format!(
                    "region {} is {} bytes here but {} bytes in the parent",
                    r.region,
                    region.len(),
                    r.region_len
                ));
            }
            *used = generation;
            return Ok(region.clone());
        }
        let region = SharedRegion::map_from_parent(self.parent, r.fd, r.region_len, r.region)
            .map_err(|e| format!("cannot map shared region {} of the parent: {e}", r.region))?;
        let region = Arc::new(region);
        self.regions.insert(r.region, (region.clone(), generation));
        self.evict();
        Ok(region)
    }

    /// A mapping of `r`'s region of its own (a temporary staging region, a comm window), not
    /// cached.
    ///
    /// # Errors
    /// As [`map`](RegionCache::map).
    pub(crate) fn map_once(&self, r: &SharedRef) -> Result<SharedRegion, String> {
        check_span(r)?;
        SharedRegion::map_from_parent(self.parent, r.fd, r.region_len, r.region)
            .map_err(|e| format!("cannot map a region of the parent: {e}"))
    }

    fn evict(&mut self) {
        while self.regions.len() > MAX_CACHED_REGIONS {
            let oldest = self
                .regions
                .iter()
                .filter(|(_, (_, used))| *used < self.generation)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(id, _)| *id);
            match oldest {
                Some(id) => {
                    self.regions.remove(&id);
                }
                None => break,
            }
        }
    }

    /// `t` as a tensor over this child's mapping of its memory; `arg` names it in errors.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] naming `arg`: a region that cannot be mapped, or a
    /// view outside its shared span.
    pub(crate) fn tensor(&mut self, arg: &str, t: &WireTensor) -> Result<Tensor, WorkerError> {
        let bad = |reason: String| WorkerError::InvalidArgument {
            arg: arg.to_string(),
            reason,
        };
        let region = self.map(&t.shared).map_err(bad)?;
        let start = t
            .shared
            .offset
            .checked_add(t.byte_offset)
            .ok_or_else(|| bad("its byte offset overflows".into()))?;
        let memory: Arc<dyn HostMemory> = region;
        let tensor = Tensor::view(Memory::Host(memory), start, &t.shape, &t.strides, t.dtype)
            .map_err(|e| match e {
                WorkerError::InvalidArgument { reason, .. } => bad(reason),
                other => other,
            })?;
        let end = tensor.byte_span().map_or(u64::MAX, |(_, end)| end);
        if end > t.shared.offset + t.shared.len {
            return Err(bad(format!(
                "a view of shape {:?}, strides {:?} of {} at byte {} reaches past the {} bytes \
                 of its memory",
                t.shape, t.strides, t.dtype, t.byte_offset, t.shared.len
            )));
        }
        Ok(tensor)
    }
}
