//! Wait-reference tokens: the reference protocol a queued stream wait on another run's
//! boundary event needs (`docs/lane.md` §7, §8).
//!
//! A reference is a count on the boundary of the fence that minted it, and there is exactly
//! one way to get a count wrong: decrement one that is not yours. Each rule below closes a
//! route to that:
//!
//! - [`WaitReference`] is move-only: it has no `Clone`, so two tokens can never name one
//!   reference, and a Rust move leaves nothing behind to release twice ("a move empties the
//!   source" holds by construction; [`WaitReference::take`] is the explicit form for a token
//!   held in a place). Reserving into a live token is refused, so a live destination is never
//!   overwritten.
//! - The token carries the fence and the arming it was minted against; every mutation
//!   re-checks both (a token offered to another fence, or to its fence after it re-armed, is
//!   refused).
//! - A fence holding any reservation or committed reference refuses arm, record, retire and
//!   release (enforced in [`crate::fence`]).
//! - Only a committed reference can be released, once, and only with a proof about the
//!   stream that holds the wait (`proven_waiter`); quiescence (a stream synchronize that
//!   drained both streams, or a verified reset) releases without a per-stream proof.
//! - After [`abandon`](RunCompletionFence::abandon) (verified reset) every token minted
//!   before is stale and is dropped with
//!   [`discard_stale_wait_reference`](RunCompletionFence::discard_stale_wait_reference),
//!   which only the minting fence may judge and which refuses a token still current.

use simpler_device::EventId;

use super::{FenceError, RunCompletionFence};
use crate::identity::{RunIdentity, StreamRole, Waiter};
use crate::sync::lock;

/// Refusal reasons of the token rules, shared with the tests.
pub(crate) mod why {
    pub const OUT_NOT_EMPTY: &str = "the destination token is not empty";
    pub const NOT_OWNER: &str = "the caller does not own the fence's arming";
    pub const NOT_RECORDED: &str = "the boundary is not recorded";
    pub const NOT_RESERVED: &str = "the token is not a reservation";
    pub const NOT_COMMITTED: &str = "the token is not a committed reference";
    pub const NOT_RECOGNISED: &str = "the token was minted by another fence or arming";
    pub const WRONG_WAITER: &str = "the proof does not cover the stream that holds the wait";
    pub const ZERO_COUNT: &str = "the reference count is already zero";
    pub const EMPTY: &str = "the token is empty";
    pub const FOREIGN: &str = "the token was minted by another fence";
    pub const STILL_CURRENT: &str = "the token is still current";
}

/// State of a [`WaitReference`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefState {
    /// Names nothing.
    Empty,
    /// Counted as pending: the wait is about to be queued.
    Reserved,
    /// Counted against its waiter: a wait was (or may have been) queued.
    Committed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Minted {
    fence: u64,
    arming: u64,
    identity: RunIdentity,
    boundary: StreamRole,
    waiter: Waiter,
}

/// One reference to a boundary event held by a queued stream wait. Move-only.
#[derive(Debug)]
pub(crate) struct WaitReference {
    minted: Option<Minted>,
    state: RefState,
}

impl Default for WaitReference {
    fn default() -> Self {
        WaitReference::empty()
    }
}

impl WaitReference {
    /// A token that names nothing.
    pub(crate) const fn empty() -> WaitReference {
        WaitReference {
            minted: None,
            state: RefState::Empty,
        }
    }

    /// Its state.
    pub(crate) fn state(&self) -> RefState {
        self.state
    }

    /// True when it names nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.state == RefState::Empty
    }

    /// Moves the token out of a place, leaving the place empty.
    #[cfg_attr(any(not(test), feature = "loom"), allow(dead_code))] // spec API, exercised by the tests
    pub(crate) fn take(&mut self) -> WaitReference {
        std::mem::take(self)
    }

    fn clear(&mut self) {
        self.minted = None;
        self.state = RefState::Empty;
    }
}

impl Drop for WaitReference {
    fn drop(&mut self) {
        if !self.is_empty() {
            // The count stays on its fence (which then refuses to retire): the safe side.
            tracing::warn!(
                token = ?self.minted,
                "a live wait reference was dropped; its fence stays blocked"
            );
        }
    }
}

impl RunCompletionFence {
    fn recognises(&self, st: &crate::fence::FenceState, m: &Minted) -> bool {
        m.fence == self.id && m.arming == st.arming && st.owns(&m.identity)
    }

    /// Reserves a reference on `boundary` for a wait `waiter` is about to queue. `out` must
    /// be empty; the caller must own the arming and the boundary must be recorded.
    pub(crate) fn reserve_wait_reference(
        &self,
        id: &RunIdentity,
        boundary: StreamRole,
        waiter: impl Into<Waiter>,
        out: &mut WaitReference,
    ) -> Result<(), FenceError> {
        let waiter = waiter.into();
        if !out.is_empty() {
            return Err(FenceError::Refused(why::OUT_NOT_EMPTY));
        }
        let mut st = lock(&self.state);
        if !st.owns(id) {
            return Err(FenceError::Refused(why::NOT_OWNER));
        }
        let b = &mut st.boundaries[boundary.index()];
        if !b.recorded {
            return Err(FenceError::Refused(why::NOT_RECORDED));
        }
        b.pending += 1;
        out.minted = Some(Minted {
            fence: self.id,
            arming: st.arming,
            identity: *id,
            boundary,
            waiter,
        });
        out.state = RefState::Reserved;
        Ok(())
    }

    /// The event a wait on `boundary` must name; `None` unless the caller owns the arming
    /// and the boundary is recorded.
    pub(crate) fn boundary_event(&self, id: &RunIdentity, boundary: StreamRole) -> Option<EventId> {
        let st = lock(&self.state);
        let b = &st.boundaries[boundary.index()];
        (st.owns(id) && b.recorded).then_some(b.event).flatten()
    }

    /// The wait was queued (or its call failed in a way that may have queued it): the
    /// reservation becomes a committed reference counted against its waiter.
    pub(crate) fn commit_wait_reference(&self, r: &mut WaitReference) -> Result<(), FenceError> {
        let mut st = lock(&self.state);
        let m = match (r.state, r.minted) {
            (RefState::Reserved, Some(m)) => m,
            _ => return Err(FenceError::Refused(why::NOT_RESERVED)),
        };
        if !self.recognises(&st, &m) {
            return Err(FenceError::Refused(why::NOT_RECOGNISED));
        }
        let b = &mut st.boundaries[m.boundary.index()];
        b.pending -= 1;
        b.committed[m.waiter.index()] += 1;
        r.state = RefState::Committed;
        Ok(())
    }

    /// The wait was certainly not queued: drops the reservation and empties the token.
    pub(crate) fn revoke_wait_reference(&self, r: &mut WaitReference) -> Result<(), FenceError> {
        let mut st = lock(&self.state);
        let m = match (r.state, r.minted) {
            (RefState::Reserved, Some(m)) => m,
            _ => return Err(FenceError::Refused(why::NOT_RESERVED)),
        };
        if !self.recognises(&st, &m) {
            return Err(FenceError::Refused(why::NOT_RECOGNISED));
        }
        st.boundaries[m.boundary.index()].pending -= 1;
        r.clear();
        Ok(())
    }

    /// Releases a committed reference once a completion proof covers `proven_waiter`, the
    /// stream that actually holds the wait. Empties the token.
    pub(crate) fn release_wait_reference(
        &self,
        r: &mut WaitReference,
        proven_waiter: impl Into<Waiter>,
    ) -> Result<(), FenceError> {
        let proven_waiter = proven_waiter.into();
        let mut st = lock(&self.state);
        let m = match (r.state, r.minted) {
            (RefState::Committed, Some(m)) => m,
            _ => return Err(FenceError::Refused(why::NOT_COMMITTED)),
        };
        if !self.recognises(&st, &m) {
            return Err(FenceError::Refused(why::NOT_RECOGNISED));
        }
        if proven_waiter != m.waiter {
            return Err(FenceError::Refused(why::WRONG_WAITER));
        }
        let c = &mut st.boundaries[m.boundary.index()].committed[m.waiter.index()];
        if *c == 0 {
            return Err(FenceError::Refused(why::ZERO_COUNT));
        }
        *c -= 1;
        r.clear();
        Ok(())
    }

    /// Releases a committed reference on proven quiescence of both streams (no per-stream
    /// proof needed). Empties the token.
    pub(crate) fn release_wait_reference_on_quiescence(
        &self,
        r: &mut WaitReference,
    ) -> Result<(), FenceError> {
        let waiter = match (r.state, r.minted) {
            (RefState::Committed, Some(m)) => m.waiter,
            _ => return Err(FenceError::Refused(why::NOT_COMMITTED)),
        };
        self.release_wait_reference(r, waiter)
    }

    /// Drops a token this fence minted before an [`abandon`](RunCompletionFence::abandon).
    /// Refuses an empty token, a token another fence minted (its count lives there) and a
    /// token this fence still recognises (emptying it would leak a live count).
    pub(crate) fn discard_stale_wait_reference(
        &self,
        r: &mut WaitReference,
    ) -> Result<(), FenceError> {
        let m = match r.minted {
            Some(m) if !r.is_empty() => m,
            _ => return Err(FenceError::Refused(why::EMPTY)),
        };
        if m.fence != self.id {
            return Err(FenceError::Refused(why::FOREIGN));
        }
        let st = lock(&self.state);
        if self.recognises(&st, &m) {
            return Err(FenceError::Refused(why::STILL_CURRENT));
        }
        r.clear();
        Ok(())
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::fence::tests::{fenced_run, ident, FakeOps, S};
    use crate::fence::why as fwhy;
    use StreamRole::{Aicore, Aicpu};

    fn committed(
        f: &RunCompletionFence,
        id: &RunIdentity,
        b: StreamRole,
        w: StreamRole,
    ) -> WaitReference {
        let mut r = WaitReference::empty();
        f.reserve_wait_reference(id, b, w, &mut r).unwrap();
        f.commit_wait_reference(&mut r).unwrap();
        r
    }

    #[test]
    fn token_lifecycle_counts_and_empties() {
        let ops = FakeOps::default();
        let f = RunCompletionFence::new();
        let id = ident(1);
        fenced_run(&ops, &f, id);
        let mut r = WaitReference::empty();
        f.reserve_wait_reference(&id, Aicpu, Aicore, &mut r)
            .unwrap();
        assert_eq!(r.state(), RefState::Reserved);
        assert_eq!(f.references(), 1);
        f.commit_wait_reference(&mut r).unwrap();
        assert_eq!(r.state(), RefState::Committed);
        assert_eq!(f.references(), 1);
        // A move leaves the place empty.
        let mut moved = r.take();
        assert!(r.is_empty());
        f.release_wait_reference(&mut moved, Aicore).unwrap();
        assert!(moved.is_empty());
        assert_eq!(f.references(), 0);
        // Revoke empties a reservation.
        let mut r = WaitReference::empty();
        f.reserve_wait_reference(&id, Aicore, Aicpu, &mut r)
            .unwrap();
        f.revoke_wait_reference(&mut r).unwrap();
        assert!(r.is_empty());
        assert_eq!(f.references(), 0);
        f.retire(&id).unwrap();
    }

    /// Every refusal rule of `docs/lane.md` §7, one row each: (name, operation, expected reason).
    #[test]
    fn every_token_refusal_rule() {
        type Op = fn(&FakeOps, &RunCompletionFence, &RunCompletionFence) -> Result<(), FenceError>;
        let rows: Vec<(&str, Op, &str)> = vec![
            (
                "reserve into a live token",
                |_, f, _| {
                    let id = ident(1);
                    let mut r = committed(f, &id, Aicpu, Aicore);
                    let e = f.reserve_wait_reference(&id, Aicpu, Aicore, &mut r);
                    f.release_wait_reference(&mut r, Aicore).unwrap();
                    e
                },
                why::OUT_NOT_EMPTY,
            ),
            (
                "reserve by a non-owner",
                |_, f, _| {
                    f.reserve_wait_reference(&ident(9), Aicpu, Aicore, &mut WaitReference::empty())
                },
                why::NOT_OWNER,
            ),
            (
                "reserve an unrecorded boundary",
                |ops, _, g| {
                    let id = ident(5);
                    g.arm(ops, id).unwrap();
                    g.reserve_wait_reference(&id, Aicpu, Aicore, &mut WaitReference::empty())
                },
                why::NOT_RECORDED,
            ),
            (
                "commit an empty token",
                |_, f, _| f.commit_wait_reference(&mut WaitReference::empty()),
                why::NOT_RESERVED,
            ),
            (
                "commit twice",
                |_, f, _| {
                    let mut r = committed(f, &ident(1), Aicpu, Aicore);
                    let e = f.commit_wait_reference(&mut r);
                    f.release_wait_reference(&mut r, Aicore).unwrap();
                    e
                },
                why::NOT_RESERVED,
            ),
            (
                "commit on a foreign fence",
                |ops, f, g| {
                    fenced_run(ops, g, ident(1));
                    let mut r = WaitReference::empty();
                    f.reserve_wait_reference(&ident(1), Aicpu, Aicore, &mut r)
                        .unwrap();
                    let e = g.commit_wait_reference(&mut r);
                    f.revoke_wait_reference(&mut r).unwrap();
                    e
                },
                why::NOT_RECOGNISED,
            ),
            (
                "revoke a committed reference",
                |_, f, _| {
                    let mut r = committed(f, &ident(1), Aicpu, Aicore);
                    let e = f.revoke_wait_reference(&mut r);
                    f.release_wait_reference(&mut r, Aicore).unwrap();
                    e
                },
                why::NOT_RESERVED,
            ),
            (
                "release a reservation",
                |_, f, _| {
                    let mut r = WaitReference::empty();
                    f.reserve_wait_reference(&ident(1), Aicpu, Aicore, &mut r)
                        .unwrap();
                    let e = f.release_wait_reference(&mut r, Aicore);
                    f.revoke_wait_reference(&mut r).unwrap();
                    e
                },
                why::NOT_COMMITTED,
            ),
            (
                "release with a proof about the other stream",
                |_, f, _| {
                    let mut r = committed(f, &ident(1), Aicpu, Aicore);
                    let e = f.release_wait_reference(&mut r, Aicpu);
                    f.release_wait_reference(&mut r, Aicore).unwrap();
                    e
                },
                why::WRONG_WAITER,
            ),
            (
                "release twice",
                |_, f, _| {
                    let mut r = committed(f, &ident(1), Aicpu, Aicore);
                    f.release_wait_reference(&mut r, Aicore).unwrap();
                    f.release_wait_reference(&mut r, Aicore)
                },
                why::NOT_COMMITTED,
            ),
            (
                "release on a foreign fence",
                |ops, f, g| {
                    fenced_run(ops, g, ident(1));
                    let mut r = committed(f, &ident(1), Aicpu, Aicore);
                    let e = g.release_wait_reference(&mut r, Aicore);
                    f.release_wait_reference(&mut r, Aicore).unwrap();
                    e
                },
                why::NOT_RECOGNISED,
            ),
            (
                "release after the fence was abandoned",
                |ops, f, _| {
                    let mut r = committed(f, &ident(1), Aicpu, Aicore);
                    f.abandon();
                    let e = f.release_wait_reference(&mut r, Aicore);
                    f.discard_stale_wait_reference(&mut r).unwrap();
                    fenced_run(ops, f, ident(1));
                    e
                },
                why::NOT_RECOGNISED,
            ),
            (
                "quiescence release of a reservation",
                |_, f, _| {
                    let mut r = WaitReference::empty();
                    f.reserve_wait_reference(&ident(1), Aicpu, Aicore, &mut r)
                        .unwrap();
                    let e = f.release_wait_reference_on_quiescence(&mut r);
                    f.revoke_wait_reference(&mut r).unwrap();
                    e
                },
                why::NOT_COMMITTED,
            ),
            (
                "discard an empty token",
                |_, f, _| f.discard_stale_wait_reference(&mut WaitReference::empty()),
                why::EMPTY,
            ),
            (
                "discard a token another fence minted",
                |ops, f, g| {
                    fenced_run(ops, g, ident(1));
                    let mut r = committed(f, &ident(1), Aicpu, Aicore);
                    let e = g.discard_stale_wait_reference(&mut r);
                    f.release_wait_reference(&mut r, Aicore).unwrap();
                    e
                },
                why::FOREIGN,
            ),
            (
                "discard a token still current",
                |_, f, _| {
                    let mut r = committed(f, &ident(1), Aicpu, Aicore);
                    let e = f.discard_stale_wait_reference(&mut r);
                    f.release_wait_reference(&mut r, Aicore).unwrap();
                    e
                },
                why::STILL_CURRENT,
            ),
        ];
        for (name, op, reason) in rows {
            let ops = FakeOps::default();
            let (f, g) = (RunCompletionFence::new(), RunCompletionFence::new());
            fenced_run(&ops, &f, ident(1));
            assert_eq!(op(&ops, &f, &g), Err(FenceError::Refused(reason)), "{name}");
            assert_eq!(f.references(), 0, "{name}: the counts are back to zero");
        }
    }

    /// A fence holding a reservation or a committed reference refuses arm, record, retire
    /// and release; each refusal leaves handles and counters intact.
    #[test]
    fn references_block_arm_record_retire_release() {
        for commit in [false, true] {
            let ops = FakeOps::default();
            let f = RunCompletionFence::new();
            let id = ident(1);
            fenced_run(&ops, &f, id);
            let mut r = WaitReference::empty();
            f.reserve_wait_reference(&id, Aicpu, Aicore, &mut r)
                .unwrap();
            if commit {
                f.commit_wait_reference(&mut r).unwrap();
            }
            let refused = Err(FenceError::Refused(fwhy::REFERENCES_OUTSTANDING));
            assert_eq!(f.arm(&ops, ident(2)), refused, "arm");
            assert_eq!(f.record(&ops, &id, Aicpu, S), refused, "record");
            assert_eq!(f.retire(&id), refused, "retire");
            assert_eq!(f.release(&ops), refused, "release");
            assert_eq!(f.references(), 1);
            assert!(f.boundary_event(&id, Aicpu).is_some());
            if commit {
                f.release_wait_reference_on_quiescence(&mut r).unwrap();
            } else {
                f.revoke_wait_reference(&mut r).unwrap();
            }
            f.retire(&id).unwrap();
            f.release(&ops).unwrap();
        }
    }

    #[test]
    fn abandon_makes_tokens_stale_and_only_the_minter_discards_them() {
        let ops = FakeOps::default();
        let (f, g) = (RunCompletionFence::new(), RunCompletionFence::new());
        let id = ident(1);
        fenced_run(&ops, &f, id);
        let mut r = committed(&f, &id, Aicore, Aicpu);
        f.abandon();
        assert_eq!(f.references(), 0, "abandon drops the counts wholesale");
        assert_eq!(
            g.discard_stale_wait_reference(&mut r),
            Err(FenceError::Refused(why::FOREIGN))
        );
        f.discard_stale_wait_reference(&mut r).unwrap();
        assert!(r.is_empty());
        // Re-arming after abandon re-creates events; the old arming stays stale.
        fenced_run(&ops, &f, id);
        assert!(f.boundary_event(&id, Aicore).is_some());
    }

    #[test]
    fn not_started_kernels_can_still_hold_a_reference() {
        // A successor whose own kernels never launched may still have queued a wait on its
        // predecessor: that reference has to be released, not assumed away.
        let ops = FakeOps::default();
        let pred = RunCompletionFence::new();
        let id = ident(1);
        fenced_run(&ops, &pred, id);
        let mut r = committed(&pred, &id, Aicpu, Aicore);
        assert_eq!(
            pred.retire(&id),
            Err(FenceError::Refused(fwhy::REFERENCES_OUTSTANDING))
        );
        pred.release_wait_reference(&mut r, Aicore).unwrap();
        pred.retire(&id).unwrap();
    }
}
