//! A pipeline slot's trace area in device memory (`docs/tracing.md`, Capture): allocated
//! the first time a traced run uses the slot, grown when a run needs more, reused by the
//! slot's later traced runs and freed with the slot. Arming writes the control block and
//! zeroes every buffer header before the launch; reading back copies the headers and the
//! records written, after the run is proven finished.

use std::sync::Arc;

use simpler_abi::{TraceBufferHeader, TraceControl, TraceRecord, TRACE_MAGIC};
use simpler_device::{Device, DevicePtr};

use super::decode::{RawArea, RawBuffer};
use crate::pod::{bytes_of, from_bytes, slice_bytes_mut};
use crate::HostError;

/// One slot's trace area.
#[derive(Debug)]
pub(crate) struct TraceArea {
    ptr: DevicePtr,
    bytes: u64,
}

/// The shape of the area a run needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AreaShape {
    /// `TRACE_LEVEL_*` (≥ 1).
    pub(crate) level: u32,
    /// AICores of the device.
    pub(crate) cores: u32,
    /// AICPU threads of the run.
    pub(crate) aicpu_threads: u32,
    /// Records per buffer.
    pub(crate) capacity: u32,
    /// The device clock's origin (host `CLOCK_MONOTONIC` ns).
    pub(crate) clock_origin_ns: u64,
}

/// Makes `area` fit `shape` (allocating or growing it) and arms it for one run: writes the
/// control block and a zeroed header per buffer. Returns the area's device address.
///
/// # Errors
/// [`HostError::Device`] when the allocation or a copy fails (the run then fails to
/// prepare, as for any other slot resource).
pub(crate) fn arm(
    device: &Arc<dyn Device>,
    area: &mut Option<TraceArea>,
    shape: AreaShape,
) -> Result<u64, HostError> {
    let control = TraceControl {
        magic: TRACE_MAGIC,
        level: shape.level,
        buffer_count: shape.cores + shape.aicpu_threads,
        core_count: shape.cores,
        capacity: shape.capacity,
        clock_origin_ns: shape.clock_origin_ns,
        ..TraceControl::default()
    };
    let need = control.area_bytes();
    if area.as_ref().is_some_and(|a| a.bytes < need) {
        let old = area.take().expect("checked");
        if let Err(e) = device.free(old.ptr) {
            *area = Some(old);
            return Err(HostError::device("freeing a trace area too small to reuse")(e));
        }
    }
    if area.is_none() {
        let ptr = device.malloc(need).map_err(HostError::device(format!(
            "allocating the {need}-byte trace area"
        )))?;
        *area = Some(TraceArea { ptr, bytes: need });
    }
    let base = area.as_ref().expect("allocated").ptr;
    let copy = |offset: u64, bytes: &[u8]| {
        device
            .copy_to_device(base.offset(offset), bytes)
            .map_err(HostError::device("arming the trace area"))
    };
    copy(0, bytes_of(&control))?;
    let header = TraceBufferHeader {
        capacity: shape.capacity,
        ..TraceBufferHeader::default()
    };
    for i in 0..control.buffer_count {
        copy(control.buffer_offset(i), bytes_of(&header))?;
    }
    Ok(base.addr())
}

/// Reads the area back after the run: the control block, every header and the records
/// each buffer holds. `None` when a copy fails or the control block is not this area's
/// (the trace is then lost, never the run).
pub(crate) fn read(device: &dyn Device, area: &TraceArea) -> Option<RawArea> {
    let read = |offset: u64, len: usize| -> Option<Vec<u8>> {
        let mut raw = vec![0u8; len];
        device
            .copy_from_device(&mut raw, area.ptr.offset(offset))
            .ok()?;
        Some(raw)
    };
    let control: TraceControl = from_bytes(&read(0, std::mem::size_of::<TraceControl>())?)?;
    if control.magic != TRACE_MAGIC || control.area_bytes() > area.bytes {
        return None;
    }
    let mut buffers = Vec::with_capacity(control.buffer_count as usize);
    for i in 0..control.buffer_count {
        let at = control.buffer_offset(i);
        let header: TraceBufferHeader =
            from_bytes(&read(at, std::mem::size_of::<TraceBufferHeader>())?)?;
        let len = header.len.min(u64::from(control.capacity)) as usize;
        // Read straight into the records (one copy, no per-record parsing).
        let mut records = vec![TraceRecord::default(); len];
        if len > 0 {
            device
                .copy_from_device(
                    slice_bytes_mut(&mut records),
                    area.ptr
                        .offset(at + std::mem::size_of::<TraceBufferHeader>() as u64),
                )
                .ok()?;
        }
        buffers.push(RawBuffer { header, records });
    }
    Some(RawArea { control, buffers })
}

/// Frees the area; true when nothing is left (a failed free keeps it for a retry).
pub(crate) fn release(device: &dyn Device, area: &mut Option<TraceArea>) -> bool {
    if let Some(a) = area.take() {
        if device.free(a.ptr).is_err() {
            *area = Some(a);
            return false;
        }
    }
    true
}
