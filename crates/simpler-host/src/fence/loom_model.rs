//! The loom model: concurrent poll, wait and token counting on one fence. Run with
//! `cargo test -p simpler-host --lib --features loom --profile ci loom`.

use super::*;
use crate::fence::wait_ref::WaitReference;
use loom::sync::atomic::{AtomicBool, AtomicU32};
use loom::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

struct Ops {
    complete: AtomicBool,
    next: AtomicU32,
}

impl EventOps for Ops {
    fn create(&self) -> Result<EventId, DeviceError> {
        Ok(EventId::from_raw(self.next.fetch_add(1, SeqCst)))
    }
    fn record(&self, _: EventId, _: StreamId) -> Result<(), DeviceError> {
        Ok(())
    }
    fn query(&self, _: EventId) -> Result<EventStatus, DeviceError> {
        Ok(if self.complete.load(SeqCst) {
            EventStatus::Complete
        } else {
            EventStatus::Pending
        })
    }
    fn wait(&self, _: EventId, t: Duration) -> Result<(), DeviceError> {
        if self.complete.load(SeqCst) {
            Ok(())
        } else {
            Err(DeviceError::Timeout(t))
        }
    }
    fn destroy(&self, _: EventId) -> Result<(), DeviceError> {
        Ok(())
    }
}

#[test]
fn loom_concurrent_poll_wait_and_token_counting() {
    loom::model(|| {
        let ops = Arc::new(Ops {
            complete: AtomicBool::new(false),
            next: AtomicU32::new(1),
        });
        let f = Arc::new(RunCompletionFence::new());
        let id = RunIdentity {
            epoch: 1,
            generation: 1,
            dispatch_id: 1,
            slot: 0,
        };
        f.arm(&*ops, id).unwrap();
        for r in StreamRole::BOTH {
            f.note_kernel_submitted(&id, r);
            f.record(&*ops, &id, r, Some(StreamId::from_raw(1)))
                .unwrap();
        }
        let (f1, o1) = (f.clone(), ops.clone());
        let poller = loom::thread::spawn(move || {
            // Never blocks and never reports a failure: Pending or Complete only.
            let c = f1.poll(&*o1, &id);
            assert!(
                matches!(c, Completion::Pending | Completion::Complete),
                "{c:?}"
            );
        });
        let (f2, o2) = (f.clone(), ops.clone());
        let waiter = loom::thread::spawn(move || {
            o2.complete.store(true, SeqCst);
            f2.wait(&*o2, &id, Duration::from_secs(1)).unwrap();
        });
        let f3 = f.clone();
        let tokens = loom::thread::spawn(move || {
            let mut r = WaitReference::empty();
            f3.reserve_wait_reference(&id, StreamRole::Aicpu, StreamRole::Aicore, &mut r)
                .unwrap();
            f3.commit_wait_reference(&mut r).unwrap();
            f3.release_wait_reference(&mut r, StreamRole::Aicore)
                .unwrap();
        });
        poller.join().unwrap();
        waiter.join().unwrap();
        tokens.join().unwrap();
        assert_eq!(f.references(), 0, "every count came back");
        assert_eq!(f.poll(&*ops, &id), Completion::Complete);
        f.retire(&id).unwrap();
    });
}
