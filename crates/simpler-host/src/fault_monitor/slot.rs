//! The exception-callback slot the monitor installs into, and the reference-counted
//! install and uninstall of the monitor's callback (`docs/health.md` §2): the
//! first [`acquire`](FaultMonitor::acquire) installs, and a failed install takes no
//! reference; the last [`release`](FaultMonitor::release) uninstalls, and the reference is
//! dropped even when the uninstall fails; a confirmed device reset reinstalls.
//!
//! Owns nothing of the ring: the installed callback only reports into it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use simpler_device::{Device, DeviceError, FaultCallback};

use super::FaultMonitor;

/// The exception-callback slot the monitor installs into (`aclrtSetExceptionInfoCallback`):
/// any [`Device`], or a scripted one in tests.
pub trait ExceptionSlot {
    /// Installs `callback` in the process's slot.
    fn install(&self, callback: FaultCallback) -> Result<(), DeviceError>;
    /// Empties the process's slot.
    fn uninstall(&self) -> Result<(), DeviceError>;
}

impl<D: Device + ?Sized> ExceptionSlot for D {
    fn install(&self, callback: FaultCallback) -> Result<(), DeviceError> {
        self.set_fault_callback(Some(callback))
    }
    fn uninstall(&self) -> Result<(), DeviceError> {
        self.set_fault_callback(None)
    }
}

impl FaultMonitor {
    fn callback(&self) -> FaultCallback {
        let ring = self.ring.clone();
        Arc::new(move |n| {
            ring.report(n);
        })
    }

    /// Takes a reference; the first one installs the callback. A failed install takes no
    /// reference and returns the error.
    ///
    /// # Errors
    /// The slot's install error.
    pub fn acquire<S: ExceptionSlot + ?Sized>(&self, slot: &S) -> Result<(), DeviceError> {
        let _held = self.held();
        if !self.installed.load(Ordering::Acquire) {
            slot.install(self.callback())?;
            self.installed.store(true, Ordering::Release);
        }
        self.references.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Drops a reference; the last one uninstalls. The reference is dropped even when the
    /// uninstall fails (the error is returned). Releasing with no reference is a no-op.
    ///
    /// # Errors
    /// The slot's uninstall error.
    pub fn release<S: ExceptionSlot + ?Sized>(&self, slot: &S) -> Result<(), DeviceError> {
        let _held = self.held();
        let refs = self.references.load(Ordering::Acquire);
        if refs == 0 {
            return Ok(());
        }
        self.references.store(refs - 1, Ordering::Release);
        if refs == 1 && self.installed.load(Ordering::Acquire) {
            self.installed.store(false, Ordering::Release);
            return slot.uninstall();
        }
        Ok(())
    }

    /// After a confirmed device reset (which may have cleared the device's registrations):
    /// re-installs the callback if references are held, else records it as not installed.
    ///
    /// # Errors
    /// The slot's install error (the callback is then recorded as not installed).
    pub fn reinstall_after_device_reset<S: ExceptionSlot + ?Sized>(
        &self,
        slot: &S,
    ) -> Result<(), DeviceError> {
        let _held = self.held();
        if self.references.load(Ordering::Acquire) == 0 {
            self.installed.store(false, Ordering::Release);
            return Ok(());
        }
        match slot.install(self.callback()) {
            Ok(()) => {
                self.installed.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                self.installed.store(false, Ordering::Release);
                Err(e)
            }
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
pub(crate) mod tests {
    use super::*;
    use crate::fault_monitor::tests::notice;
    use crate::fault_monitor::NoticeRead;
    use std::cell::Cell as StdCell;

    /// A scripted exception slot: counts calls, fails on request, keeps the callback.
    #[derive(Default)]
    pub(crate) struct FakeSlot {
        pub(crate) installs: StdCell<u32>,
        pub(crate) uninstalls: StdCell<u32>,
        pub(crate) fail_install: StdCell<bool>,
        pub(crate) fail_uninstall: StdCell<bool>,
        pub(crate) callback: std::cell::RefCell<Option<FaultCallback>>,
    }

    impl ExceptionSlot for FakeSlot {
        fn install(&self, callback: FaultCallback) -> Result<(), DeviceError> {
            self.installs.set(self.installs.get() + 1);
            if self.fail_install.get() {
                return Err(DeviceError::Injected("install"));
            }
            *self.callback.borrow_mut() = Some(callback);
            Ok(())
        }
        fn uninstall(&self) -> Result<(), DeviceError> {
            self.uninstalls.set(self.uninstalls.get() + 1);
            *self.callback.borrow_mut() = None;
            if self.fail_uninstall.get() {
                return Err(DeviceError::Injected("uninstall"));
            }
            Ok(())
        }
    }
    #[derive(Clone, Copy, Debug)]
    enum Op {
        Acquire,
        AcquireFailing,
        Release,
        ReleaseFailing,
    }

    #[test]
    fn reference_counted_install_and_uninstall() {
        use Op::*;
        // (steps, references, installed, install calls, uninstall calls, errors)
        type Row<'a> = (&'a [Op], u32, bool, u32, u32, usize);
        let rows: &[Row<'_>] = &[
            (&[Acquire], 1, true, 1, 0, 0),
            (&[Acquire, Acquire], 2, true, 1, 0, 0),
            (&[Acquire, Acquire, Release], 1, true, 1, 0, 0),
            (&[Acquire, Acquire, Release, Release], 0, false, 1, 1, 0),
            // A failed install takes no reference; the next acquire installs.
            (&[AcquireFailing], 0, false, 1, 0, 1),
            (&[AcquireFailing, Acquire], 1, true, 2, 0, 1),
            // The last release drops its reference even when the uninstall fails.
            (&[Acquire, ReleaseFailing], 0, false, 1, 1, 1),
            (&[Acquire, ReleaseFailing, Acquire], 1, true, 2, 1, 1),
            // Releasing with nothing held does nothing.
            (&[Release], 0, false, 0, 0, 0),
        ];
        for (steps, refs, installed, installs, uninstalls, errors) in rows {
            let m = FaultMonitor::new();
            let slot = FakeSlot::default();
            let mut errs = 0;
            for op in *steps {
                slot.fail_install.set(matches!(op, AcquireFailing));
                slot.fail_uninstall.set(matches!(op, ReleaseFailing));
                let r = match op {
                    Acquire | AcquireFailing => m.acquire(&slot),
                    Release | ReleaseFailing => m.release(&slot),
                };
                errs += usize::from(r.is_err());
            }
            let s = m.snapshot();
            let got = (
                s.references,
                s.installed,
                slot.installs.get(),
                slot.uninstalls.get(),
                errs,
            );
            assert_eq!(
                got,
                (*refs, *installed, *installs, *uninstalls, *errors),
                "{steps:?}"
            );
        }
    }

    #[test]
    fn reinstall_after_a_confirmed_reset() {
        // (references held, install fails, installed after, install calls, error)
        let rows = [
            (2u32, false, true, 2u32, false),
            (1, true, false, 2, true),
            (0, false, false, 0, false),
        ];
        for (refs, fails, installed, installs, error) in rows {
            let m = FaultMonitor::new();
            let slot = FakeSlot::default();
            for _ in 0..refs {
                m.acquire(&slot).unwrap();
            }
            slot.fail_install.set(fails);
            let r = m.reinstall_after_device_reset(&slot);
            assert_eq!(r.is_err(), error, "refs {refs}");
            let s = m.snapshot();
            assert_eq!((s.installed, slot.installs.get()), (installed, installs));
            assert_eq!(
                s.references, refs,
                "a reinstall never changes the references"
            );
        }
    }

    #[test]
    fn the_installed_callback_reports_into_the_ring_and_a_cursor_reads_each_once() {
        let m = FaultMonitor::new();
        let slot = FakeSlot::default();
        m.acquire(&slot).unwrap();
        let mut c = m.cursor_from_now();
        let cb = slot.callback.borrow().clone().unwrap();
        for k in 1..=3 {
            cb(notice(k));
        }
        for k in 1..=3 {
            assert_eq!(m.read(&mut c), NoticeRead::Notice(notice(k)));
        }
        assert_eq!(m.read(&mut c), NoticeRead::End);
        assert_eq!(
            m.read(&mut c),
            NoticeRead::End,
            "nothing is delivered twice"
        );
        assert_eq!((c.delivered, c.lost, c.dropped), (3, 0, 0));
        // A cursor started later sees only what comes after it.
        let mut late = m.cursor_from_now();
        cb(notice(9));
        assert_eq!(m.read(&mut late), NoticeRead::Notice(notice(9)));
        assert_eq!(m.read(&mut c), NoticeRead::Notice(notice(9)));
    }
}
