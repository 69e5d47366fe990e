//! Alias ordering: a run whose host buffers overlap those of a run still in the lane — one
//! of the two writing them — is not staged before that run has finalized, so submissions on
//! shared buffers give the result of executing them in order.
//!
//! The host copies a run's inputs in when it is prepared and its outputs back when it is
//! finalized; a successor staged while its predecessor executes would otherwise read a
//! buffer before the predecessor's outputs are copied into it (or have its own outputs
//! overwritten by them). Buffers are compared by host address range (what a host tensor
//! lends, [`OwnedArg::host_bytes`]: writable buffers and read-only inputs alike, so a
//! read-only view of memory an earlier run writes is ordered behind that run); a range is
//! written when its argument is copied back (`Out`, `InOut`). Runs that only read the same
//! bytes still pipeline. Device tensors passed in place are the caller's to order.
//!
//! Pure rules: the pump consults them before it prepares a run; nothing here touches the
//! lane or the device.

use crate::args::OwnedArg;
use crate::signature::Signature;

/// The host bytes one argument lends a run, `[start, end)`, and whether the run writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostRange {
    /// Address of the first byte.
    pub(crate) start: usize,
    /// One past the last byte.
    pub(crate) end: usize,
    /// The run copies its output back into these bytes.
    pub(crate) writes: bool,
}

/// The host ranges of a run's tensor arguments (signature order; scalars and device
/// tensors lend no host bytes).
pub(crate) fn host_ranges(signature: &Signature, args: &[OwnedArg]) -> Vec<HostRange> {
    signature
        .args
        .iter()
        .zip(args)
        .filter_map(|(spec, arg)| {
            let bytes = arg.host_bytes()?;
            let start = bytes.as_ptr() as usize;
            Some(HostRange {
                start,
                end: start + bytes.len(),
                writes: spec.direction.copies_back(),
            })
        })
        .collect()
}

/// Whether a run lending `later` must wait for a run lending `earlier`: some range of one
/// shares a byte with some range of the other, and at least one of the two writes it.
pub(crate) fn conflict(earlier: &[HostRange], later: &[HostRange]) -> bool {
    earlier.iter().any(|e| {
        later
            .iter()
            .any(|l| e.start < l.end && l.start < e.end && (e.writes || l.writes))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArgDirection, ArgSpec};
    use simpler_abi::DataType;

    #[test]
    fn every_host_tensor_lends_its_range_and_outputs_write_it() {
        let spec = |name: &str, direction| ArgSpec {
            name: name.into(),
            direction,
            dtype: DataType::Uint8,
            shape: None,
        };
        let sig = Signature::new(vec![
            spec("x", ArgDirection::In),
            spec("y", ArgDirection::In),
            spec("z", ArgDirection::InOut),
            spec("n", ArgDirection::Scalar),
        ])
        .unwrap();
        let shared: std::sync::Arc<[u8]> = vec![0u8; 8].into();
        let (x, z) = (vec![0u8; 4], vec![0u8; 2]);
        let want = |b: &[u8], writes| HostRange {
            start: b.as_ptr() as usize,
            end: b.as_ptr() as usize + b.len(),
            writes,
        };
        let expected = [want(&x, false), want(&shared, false), want(&z, true)];
        let args = [
            OwnedArg::Tensor {
                buffer: Box::new(x),
                shape: vec![4],
                dtype: DataType::Uint8,
            },
            OwnedArg::Input {
                buffer: Box::new(shared),
                shape: vec![8],
                dtype: DataType::Uint8,
            },
            OwnedArg::Tensor {
                buffer: Box::new(z),
                shape: vec![2],
                dtype: DataType::Uint8,
            },
            OwnedArg::Scalar(3),
        ];
        assert_eq!(host_ranges(&sig, &args), expected);
    }

    fn r(start: usize, end: usize, writes: bool) -> HostRange {
        HostRange { start, end, writes }
    }

    #[test]
    fn overlapping_ranges_conflict_when_either_side_writes() {
        // (earlier, later, conflict)
        let rows = [
            (r(0, 16, true), r(8, 24, false), true),
            (r(0, 16, false), r(8, 24, true), true),
            (r(0, 16, true), r(8, 24, true), true),
            (r(0, 16, false), r(8, 24, false), false),
            (r(0, 16, true), r(16, 32, true), false),
            (r(4, 8, true), r(0, 64, false), true),
        ];
        for (e, l, want) in rows {
            assert_eq!(conflict(&[e], &[l]), want, "{e:?} / {l:?}");
            assert_eq!(conflict(&[l], &[e]), want, "symmetric: {l:?} / {e:?}");
        }
        assert!(!conflict(&[], &[r(0, 8, true)]));
        assert!(conflict(
            &[r(100, 200, false), r(0, 8, true)],
            &[r(300, 400, true), r(4, 5, false)]
        ));
    }
}
