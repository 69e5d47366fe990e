//! The handles a [`Device`](crate::Device) hands out: device addresses, streams, events.
//!
//! Their fields are private: a handle is normally obtained from the device that issued it.
//! A backend (or a test mock standing in for one) makes them with the `from_raw`
//! constructors, which keep forging visible and greppable. A handle a device did not issue
//! is refused by that device with a typed error ([`DeviceError::UnknownPointer`],
//! [`DeviceError::UnknownStream`], [`DeviceError::UnknownEvent`]), never undefined
//! behaviour. This module holds no device state.
//!
//! [`DeviceError::UnknownPointer`]: crate::DeviceError::UnknownPointer
//! [`DeviceError::UnknownStream`]: crate::DeviceError::UnknownStream
//! [`DeviceError::UnknownEvent`]: crate::DeviceError::UnknownEvent

/// A device address, in bytes. On the sim platform it is a host address.
///
/// Obtained from [`Device::malloc`](crate::Device::malloc) (an allocation's base) and
/// [`DevicePtr::offset`] (an address inside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DevicePtr(u64);

impl DevicePtr {
    /// The null address: no allocation. The runtime's kernels launched with it exit at once.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// A device address from its raw value, **for `Device` implementations and the code
    /// that reads addresses back from device memory or from a user** (a Python buffer's
    /// address). Every memory call of a device checks the address against its live
    /// allocations: one it did not hand out is refused with
    /// [`DeviceError::UnknownPointer`](crate::DeviceError::UnknownPointer).
    pub const fn from_raw(addr: u64) -> DevicePtr {
        DevicePtr(addr)
    }

    /// The raw address, in bytes.
    pub const fn addr(self) -> u64 {
        self.0
    }

    /// The address `bytes` past this one.
    pub const fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0 + bytes)
    }
}

/// Handle of a stream created by [`Device::create_stream`](crate::Device::create_stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamId(u32);

impl StreamId {
    /// A stream handle from its raw value, **for `Device` implementations only** (and the
    /// code that carries a handle through a raw channel, such as a fault notice ring). A
    /// handle not issued by the device it is given to is refused with
    /// [`DeviceError::UnknownStream`](crate::DeviceError::UnknownStream).
    pub const fn from_raw(raw: u32) -> StreamId {
        StreamId(raw)
    }

    /// The raw value, as the device numbers its streams.
    pub const fn raw(self) -> u32 {
        self.0
    }
}

/// Handle of an event created by [`Device::create_event`](crate::Device::create_event).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId(u32);

impl EventId {
    /// An event handle from its raw value, **for `Device` implementations only**. A handle
    /// not issued by the device it is given to is refused with
    /// [`DeviceError::UnknownEvent`](crate::DeviceError::UnknownEvent).
    pub const fn from_raw(raw: u32) -> EventId {
        EventId(raw)
    }

    /// The raw value, as the device numbers its events.
    pub const fn raw(self) -> u32 {
        self.0
    }
}
