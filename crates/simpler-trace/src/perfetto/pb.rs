//! A minimal protobuf encoder writing straight into a byte buffer, for [`super::write`].
//!
//! Owns the wire encoding (varints, field keys, length-delimited fields) and the field numbers
//! of the Perfetto messages we write (`perfetto.protos.TracePacket` and the messages under it,
//! as the `perfetto_protos` crate's .proto files number them; a test checks every number and
//! enum value against that crate's descriptors, and the export tests decode what the writer
//! writes with that crate's parser). Knows nothing of the track
//! layout. A nested message is written in place: its length is reserved as one byte and the
//! body moved along in the rare case it needs more.

/// Wire type of varint fields.
const VARINT: u32 = 0;
/// Wire type of 64-bit fixed fields.
const FIXED64: u32 = 1;
/// Wire type of length-delimited fields (bytes, strings, messages).
const LEN: u32 = 2;

/// `perfetto.protos.Trace`.
pub(super) mod trace {
    /// `repeated TracePacket packet`.
    pub const PACKET: u32 = 1;
}

/// `perfetto.protos.TracePacket`.
pub(super) mod packet {
    /// `uint64 timestamp`.
    pub const TIMESTAMP: u32 = 8;
    /// `uint32 trusted_packet_sequence_id`.
    pub const SEQUENCE_ID: u32 = 10;
    /// `TrackEvent track_event`.
    pub const TRACK_EVENT: u32 = 11;
    /// `InternedData interned_data`.
    pub const INTERNED_DATA: u32 = 12;
    /// `uint32 sequence_flags`.
    pub const SEQUENCE_FLAGS: u32 = 13;
    /// `TrackDescriptor track_descriptor`.
    pub const TRACK_DESCRIPTOR: u32 = 60;
    /// `SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED`.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
    /// `SequenceFlags.SEQ_NEEDS_INCREMENTAL_STATE`.
    pub const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
}

/// `perfetto.protos.InternedData`, and `EventName` / `DebugAnnotationName` under it.
pub(super) mod interned {
    /// `repeated EventName event_names`.
    pub const EVENT_NAMES: u32 = 2;
    /// `repeated DebugAnnotationName debug_annotation_names`.
    pub const DEBUG_ANNOTATION_NAMES: u32 = 3;
    /// `uint64 iid` of `EventName` and `DebugAnnotationName`.
    pub const IID: u32 = 1;
    /// `string name` of `EventName` and `DebugAnnotationName`.
    pub const NAME: u32 = 2;
}

/// `perfetto.protos.TrackEvent`.
pub(super) mod event {
    /// `DebugAnnotation debug_annotations` (repeated).
    pub const DEBUG_ANNOTATIONS: u32 = 4;
    /// `Type type`.
    pub const TYPE: u32 = 9;
    /// `uint64 name_iid`.
    pub const NAME_IID: u32 = 10;
    /// `uint64 track_uuid`.
    pub const TRACK_UUID: u32 = 11;
    /// `int64 counter_value`.
    pub const COUNTER_VALUE: u32 = 30;
    /// `fixed64 flow_ids` (repeated).
    pub const FLOW_IDS: u32 = 47;
    /// `fixed64 terminating_flow_ids` (repeated).
    pub const TERMINATING_FLOW_IDS: u32 = 48;
    /// `Type.TYPE_SLICE_BEGIN`.
    pub const SLICE_BEGIN: u64 = 1;
    /// `Type.TYPE_SLICE_END`.
    pub const SLICE_END: u64 = 2;
    /// `Type.TYPE_INSTANT`.
    pub const INSTANT: u64 = 3;
    /// `Type.TYPE_COUNTER`.
    pub const COUNTER: u64 = 4;
}

/// `perfetto.protos.DebugAnnotation`.
pub(super) mod annotation {
    /// `uint64 name_iid`.
    pub const NAME_IID: u32 = 1;
    /// `uint64 uint_value`.
    pub const UINT_VALUE: u32 = 3;
    /// `string string_value`.
    pub const STRING_VALUE: u32 = 6;
}

/// `perfetto.protos.TrackDescriptor` and the descriptors under it.
pub(super) mod descriptor {
    /// `uint64 uuid`.
    pub const UUID: u32 = 1;
    /// `string name`.
    pub const NAME: u32 = 2;
    /// `ProcessDescriptor process`.
    pub const PROCESS: u32 = 3;
    /// `ThreadDescriptor thread`.
    pub const THREAD: u32 = 4;
    /// `uint64 parent_uuid`.
    pub const PARENT_UUID: u32 = 5;
    /// `CounterDescriptor counter`.
    pub const COUNTER: u32 = 8;
    /// `int32 pid` of `ProcessDescriptor` and `ThreadDescriptor`.
    pub const PID: u32 = 1;
    /// `int32 tid` of `ThreadDescriptor`.
    pub const TID: u32 = 2;
    /// `string thread_name` of `ThreadDescriptor`.
    pub const THREAD_NAME: u32 = 5;
    /// `string process_name` of `ProcessDescriptor`.
    pub const PROCESS_NAME: u32 = 6;
}

/// Appends `v` as a base-128 varint.
#[inline]
pub(super) fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
fn key(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, u64::from(field << 3 | wire));
}

/// Appends varint field `field` = `v`.
#[inline]
pub(super) fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    key(buf, field, VARINT);
    varint(buf, v);
}

/// Appends `int32` / `int64` field `field` = `v` (a negative value takes ten bytes, as the
/// wire format wants).
#[inline]
pub(super) fn int(buf: &mut Vec<u8>, field: u32, v: i64) {
    uint(buf, field, v as u64);
}

/// Appends `fixed64` field `field` = `v`.
#[inline]
pub(super) fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    key(buf, field, FIXED64);
    buf.extend_from_slice(&v.to_le_bytes());
}

/// Appends string (or bytes) field `field` = `s`.
#[inline]
pub(super) fn bytes(buf: &mut Vec<u8>, field: u32, s: &[u8]) {
    key(buf, field, LEN);
    varint(buf, s.len() as u64);
    buf.extend_from_slice(s);
}

/// Bytes the varint of `v` takes.
#[inline]
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends length-delimited field `field` (a message, or a string built in place) whose body
/// `body` writes onto the buffer.
#[inline]
pub(super) fn nested(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    key(buf, field, LEN);
    let at = buf.len();
    buf.push(0);
    body(buf);
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
        return;
    }
    let n = varint_len(len as u64);
    buf.resize(buf.len() + n - 1, 0);
    buf.copy_within(at + 1..at + 1 + len, at + n);
    let mut v = len as u64;
    for b in &mut buf[at..at + n] {
        *b = (v as u8 & 0x7f) | if v >= 0x80 { 0x80 } else { 0 };
        v >>= 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protobuf::{Enum, Message, MessageFull};

    /// The number of field `name` of message `M` in the `perfetto_protos` schema.
    fn field<M: MessageFull>(name: &str) -> u32 {
        let d = M::descriptor();
        let f = d
            .field_by_name(name)
            .unwrap_or_else(|| panic!("{} has no field `{name}`", d.full_name()));
        f.number() as u32
    }

    /// Every field number and enum value written here is the one the maintained schema
    /// (`perfetto_protos`) gives: the encoder writes the wire format, the schema is theirs.
    #[test]
    fn field_numbers_are_the_schema_s() {
        use perfetto_protos::debug_annotation::{DebugAnnotation, DebugAnnotationName};
        use perfetto_protos::interned_data::InternedData;
        use perfetto_protos::process_descriptor::ProcessDescriptor;
        use perfetto_protos::thread_descriptor::ThreadDescriptor;
        use perfetto_protos::trace::Trace;
        use perfetto_protos::trace_packet::trace_packet::SequenceFlags;
        use perfetto_protos::trace_packet::TracePacket;
        use perfetto_protos::track_descriptor::TrackDescriptor;
        use perfetto_protos::track_event::track_event::Type;
        use perfetto_protos::track_event::{EventName, TrackEvent};
        let checks: [(u32, u32, &str); 32] = [
            (trace::PACKET, field::<Trace>("packet"), "Trace.packet"),
            (
                packet::TIMESTAMP,
                field::<TracePacket>("timestamp"),
                "timestamp",
            ),
            (
                packet::SEQUENCE_ID,
                field::<TracePacket>("trusted_packet_sequence_id"),
                "seq",
            ),
            (
                packet::TRACK_EVENT,
                field::<TracePacket>("track_event"),
                "track_event",
            ),
            (
                packet::INTERNED_DATA,
                field::<TracePacket>("interned_data"),
                "interned",
            ),
            (
                packet::SEQUENCE_FLAGS,
                field::<TracePacket>("sequence_flags"),
                "flags",
            ),
            (
                packet::TRACK_DESCRIPTOR,
                field::<TracePacket>("track_descriptor"),
                "td",
            ),
            (
                interned::EVENT_NAMES,
                field::<InternedData>("event_names"),
                "event_names",
            ),
            (
                interned::DEBUG_ANNOTATION_NAMES,
                field::<InternedData>("debug_annotation_names"),
                "annotation names",
            ),
            (interned::IID, field::<EventName>("iid"), "EventName.iid"),
            (interned::NAME, field::<EventName>("name"), "EventName.name"),
            (
                interned::IID,
                field::<DebugAnnotationName>("iid"),
                "DAN.iid",
            ),
            (
                interned::NAME,
                field::<DebugAnnotationName>("name"),
                "DAN.name",
            ),
            (
                event::DEBUG_ANNOTATIONS,
                field::<TrackEvent>("debug_annotations"),
                "da",
            ),
            (event::TYPE, field::<TrackEvent>("type"), "type"),
            (event::NAME_IID, field::<TrackEvent>("name_iid"), "name_iid"),
            (
                event::TRACK_UUID,
                field::<TrackEvent>("track_uuid"),
                "track_uuid",
            ),
            (
                event::COUNTER_VALUE,
                field::<TrackEvent>("counter_value"),
                "counter",
            ),
            (event::FLOW_IDS, field::<TrackEvent>("flow_ids"), "flow_ids"),
            (
                event::TERMINATING_FLOW_IDS,
                field::<TrackEvent>("terminating_flow_ids"),
                "terminating",
            ),
            (
                annotation::NAME_IID,
                field::<DebugAnnotation>("name_iid"),
                "DA.name_iid",
            ),
            (
                annotation::UINT_VALUE,
                field::<DebugAnnotation>("uint_value"),
                "uint",
            ),
            (
                annotation::STRING_VALUE,
                field::<DebugAnnotation>("string_value"),
                "str",
            ),
            (descriptor::UUID, field::<TrackDescriptor>("uuid"), "uuid"),
            (descriptor::NAME, field::<TrackDescriptor>("name"), "name"),
            (
                descriptor::PROCESS,
                field::<TrackDescriptor>("process"),
                "process",
            ),
            (
                descriptor::THREAD,
                field::<TrackDescriptor>("thread"),
                "thread",
            ),
            (
                descriptor::PARENT_UUID,
                field::<TrackDescriptor>("parent_uuid"),
                "parent",
            ),
            (
                descriptor::COUNTER,
                field::<TrackDescriptor>("counter"),
                "counter",
            ),
            (descriptor::PID, field::<ProcessDescriptor>("pid"), "pd.pid"),
            (descriptor::PID, field::<ThreadDescriptor>("pid"), "td.pid"),
            (descriptor::TID, field::<ThreadDescriptor>("tid"), "tid"),
        ];
        for (ours, schema, what) in checks {
            assert_eq!(ours, schema, "{what}");
        }
        assert_eq!(
            descriptor::THREAD_NAME,
            field::<ThreadDescriptor>("thread_name")
        );
        assert_eq!(
            descriptor::PROCESS_NAME,
            field::<ProcessDescriptor>("process_name")
        );
        let value = |v: i32| v as u64;
        assert_eq!(event::SLICE_BEGIN, value(Type::TYPE_SLICE_BEGIN.value()));
        assert_eq!(event::SLICE_END, value(Type::TYPE_SLICE_END.value()));
        assert_eq!(event::INSTANT, value(Type::TYPE_INSTANT.value()));
        assert_eq!(event::COUNTER, value(Type::TYPE_COUNTER.value()));
        assert_eq!(
            packet::SEQ_INCREMENTAL_STATE_CLEARED,
            value(SequenceFlags::SEQ_INCREMENTAL_STATE_CLEARED.value())
        );
        assert_eq!(
            packet::SEQ_NEEDS_INCREMENTAL_STATE,
            value(SequenceFlags::SEQ_NEEDS_INCREMENTAL_STATE.value())
        );
    }

    #[test]
    fn varints_and_nested_lengths_decode() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        for v in [0, 1, 127, 128, 16_383, 16_384, u64::MAX] {
            let mut b = Vec::new();
            varint(&mut b, v);
            assert_eq!(varint_len(v), b.len(), "{v}");
        }
        // A TrackEvent with a body past 127 bytes (its length takes three bytes) inside a packet.
        let long = "x".repeat(20_000);
        let mut buf = Vec::new();
        uint(&mut buf, packet::TIMESTAMP, 1 << 40);
        nested(&mut buf, packet::TRACK_EVENT, |b| {
            uint(b, event::TYPE, event::INSTANT);
            int(b, event::COUNTER_VALUE, -5);
            fixed64(b, event::FLOW_IDS, 7);
            nested(b, event::DEBUG_ANNOTATIONS, |b| {
                bytes(b, annotation::STRING_VALUE, long.as_bytes());
            });
        });
        let p = perfetto_protos::trace_packet::TracePacket::parse_from_bytes(&buf).unwrap();
        assert_eq!(p.timestamp(), 1 << 40);
        let e = p.track_event();
        assert_eq!(e.counter_value(), -5);
        assert_eq!(e.flow_ids, [7]);
        assert_eq!(e.debug_annotations[0].string_value(), long);
    }
}
