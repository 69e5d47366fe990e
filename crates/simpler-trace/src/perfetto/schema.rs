//! The part of Perfetto's protobuf schema that [`super::read`] decodes, and the file framing.
//!
//! Owns the `prost` messages mirroring only the messages and fields the reader uses; every
//! other field of a file is skipped as unknown. Each struct names the `perfetto.protos`
//! message it mirrors and each field its `.proto` field (number, type); a test checks them all
//! against the `perfetto_protos` crate's schema. Fields that are a `oneof` member in Perfetto
//! (`TracePacket.data`, `TrackEvent.name_field`, `DebugAnnotation.name_field` and `value`,
//! `TrackDescriptor.static_or_dynamic_name`) are plain optional fields here: the wire format
//! is the same. Knows nothing of the track layout.
//!
//! `perfetto.protos.Trace` itself is not a struct: a trace file is a sequence of its
//! `repeated TracePacket packet = 1` fields, which [`packets`] decodes one at a time so an
//! error can name the offset of the packet that is broken.

use prost::Message;

use crate::error::{Corruption, TraceError};

/// The key byte of a `Trace.packet` field (field 1, length-delimited) that starts every
/// packet of a trace file.
pub(super) const PACKET_KEY: u8 = 1 << 3 | 2;

/// `perfetto.protos.TracePacket`.
#[derive(Clone, PartialEq, Message)]
pub(super) struct TracePacket {
    /// `optional uint64 timestamp = 8`.
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    /// `uint32 trusted_packet_sequence_id = 10` (oneof `optional_trusted_packet_sequence_id`).
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    /// `TrackEvent track_event = 11` (oneof `data`).
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    /// `optional InternedData interned_data = 12`.
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    /// `optional uint32 sequence_flags = 13` (bits of `SequenceFlags`).
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    /// `TrackDescriptor track_descriptor = 60` (oneof `data`).
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

/// `perfetto.protos.TrackEvent`.
#[derive(Clone, PartialEq, Message)]
pub(super) struct TrackEvent {
    /// `repeated DebugAnnotation debug_annotations = 4`.
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    /// `optional Type type = 9`.
    #[prost(enumeration = "EventType", optional, tag = "9")]
    pub r#type: Option<i32>,
    /// `uint64 name_iid = 10` (oneof `name_field`).
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    /// `optional uint64 track_uuid = 11`.
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// `string name = 23` (oneof `name_field`).
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    /// `int64 counter_value = 30` (oneof `counter_value_field`).
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
}

/// `perfetto.protos.TrackEvent.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub(super) enum EventType {
    /// `TYPE_UNSPECIFIED = 0`.
    Unspecified = 0,
    /// `TYPE_SLICE_BEGIN = 1`.
    SliceBegin = 1,
    /// `TYPE_SLICE_END = 2`.
    SliceEnd = 2,
    /// `TYPE_INSTANT = 3`.
    Instant = 3,
    /// `TYPE_COUNTER = 4`.
    Counter = 4,
}

/// `perfetto.protos.DebugAnnotation`.
#[derive(Clone, PartialEq, Message)]
pub(super) struct DebugAnnotation {
    /// `uint64 name_iid = 1` (oneof `name_field`).
    #[prost(uint64, optional, tag = "1")]
    pub name_iid: Option<u64>,
    /// `uint64 uint_value = 3` (oneof `value`).
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    /// `string string_value = 6` (oneof `value`).
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
    /// `string name = 10` (oneof `name_field`).
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
}

/// `perfetto.protos.InternedData`.
#[derive(Clone, PartialEq, Message)]
pub(super) struct InternedData {
    /// `repeated EventName event_names = 2`.
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<InternedName>,
    /// `repeated DebugAnnotationName debug_annotation_names = 3`.
    #[prost(message, repeated, tag = "3")]
    pub debug_annotation_names: Vec<InternedName>,
}

/// `perfetto.protos.EventName` and `perfetto.protos.DebugAnnotationName`, which number their
/// fields alike.
#[derive(Clone, PartialEq, Message)]
pub(super) struct InternedName {
    /// `optional uint64 iid = 1`.
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// `optional string name = 2`.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

/// `perfetto.protos.TrackDescriptor`.
#[derive(Clone, PartialEq, Message)]
pub(super) struct TrackDescriptor {
    /// `optional uint64 uuid = 1`.
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    /// `string name = 2` (oneof `static_or_dynamic_name`).
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    /// `optional ProcessDescriptor process = 3`.
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    /// `optional ThreadDescriptor thread = 4`.
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    /// `optional uint64 parent_uuid = 5`.
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    /// `optional CounterDescriptor counter = 8`: only its presence is read.
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

/// `perfetto.protos.ProcessDescriptor`.
#[derive(Clone, PartialEq, Message)]
pub(super) struct ProcessDescriptor {
    /// `optional int32 pid = 1`.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// `optional string process_name = 6`.
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

/// `perfetto.protos.ThreadDescriptor`.
#[derive(Clone, PartialEq, Message)]
pub(super) struct ThreadDescriptor {
    /// `optional int32 pid = 1`.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// `optional string thread_name = 5`.
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// `perfetto.protos.CounterDescriptor`, none of whose fields are read.
#[derive(Clone, PartialEq, Message)]
pub(super) struct CounterDescriptor {}

/// The packets of the trace file `bytes`, in file order, each decoded when it is reached.
/// After the first error the iteration ends.
pub(super) fn packets(bytes: &[u8]) -> Packets<'_> {
    Packets { bytes, at: 0 }
}

/// The iterator [`packets`] returns.
pub(super) struct Packets<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Packets<'_> {
    /// Decodes the packet at `self.at` and moves past it.
    fn decode(&mut self) -> Result<TracePacket, Corruption> {
        let rest = &self.bytes[self.at..];
        let Some((&PACKET_KEY, mut body)) = rest.split_first() else {
            return Err(Corruption::NotAPacket);
        };
        let len = prost::decode_length_delimiter(&mut body).map_err(|_| {
            // A length varint that runs to the end of the file was cut off.
            if body.len() < 10 && body.iter().all(|b| b & 0x80 != 0) {
                Corruption::Truncated
            } else {
                Corruption::NotAPacket
            }
        })?;
        let packet = body.get(..len).ok_or(Corruption::Truncated)?;
        let packet = TracePacket::decode(packet).map_err(|_| Corruption::BadPacket)?;
        self.at += rest.len() - body.len() + len;
        Ok(packet)
    }
}

impl Iterator for Packets<'_> {
    type Item = Result<TracePacket, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let offset = self.at;
        Some(self.decode().map_err(|problem| {
            self.at = self.bytes.len();
            TraceError::Protobuf { offset, problem }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfetto_protos as oracle;
    use std::fmt;

    use protobuf::{Enum, EnumFull, MessageField};

    /// `theirs` (a `perfetto_protos` message) and `ours` are the same message on the wire:
    /// each decodes the other's encoding into an equal value. A field number or type that
    /// differs from Perfetto's loses or changes a value one way or the other.
    fn agree<O, S>(theirs: &O, ours: &S)
    where
        O: protobuf::Message + PartialEq + fmt::Debug,
        S: Message + Default + PartialEq + fmt::Debug,
    {
        let from_theirs = S::decode(theirs.write_to_bytes().unwrap().as_slice()).unwrap();
        assert_eq!(&from_theirs, ours, "decoded from perfetto_protos");
        let from_ours = O::parse_from_bytes(&ours.encode_to_vec()).unwrap();
        assert_eq!(&from_ours, theirs, "perfetto_protos decoding ours");
    }

    fn name(iid: u64, name: &str) -> InternedName {
        InternedName {
            iid: Some(iid),
            name: Some(name.into()),
        }
    }

    /// Every mirrored field, set to a value only the right number and type carry (negative
    /// ints, values past 32 bits), in each of its `oneof` alternatives.
    #[test]
    fn schema_subset_is_perfetto_s() {
        use oracle::debug_annotation::{
            DebugAnnotation as PDebugAnnotation, DebugAnnotationName as PAnnName,
        };
        use oracle::interned_data::InternedData as PInterned;
        use oracle::track_event::{track_event::Type, EventName as PEventName};

        let mut a1 = PDebugAnnotation::new();
        a1.set_name_iid(1 << 33);
        a1.set_uint_value(u64::MAX - 1);
        let mut a2 = PDebugAnnotation::new();
        a2.set_name("deps".into());
        a2.set_string_value("RAW from task 3".into());
        let mut e = oracle::track_event::TrackEvent::new();
        e.debug_annotations = vec![a1, a2];
        e.set_type(Type::TYPE_COUNTER);
        e.set_name_iid(1 << 34);
        e.set_track_uuid(u64::MAX - 2);
        e.set_counter_value(-(1 << 40));
        let mut en = PEventName::new();
        en.set_iid(1 << 35);
        en.set_name("gemm".into());
        let mut an = PAnnName::new();
        an.set_iid(1 << 36);
        an.set_name("epoch".into());
        let mut d = PInterned::new();
        d.event_names = vec![en];
        d.debug_annotation_names = vec![an];
        let mut p = oracle::trace_packet::TracePacket::new();
        p.set_timestamp(1 << 50);
        p.set_trusted_packet_sequence_id(u32::MAX - 3);
        p.set_track_event(e);
        p.interned_data = MessageField::some(d);
        p.set_sequence_flags(u32::MAX - 4);
        let event = TrackEvent {
            debug_annotations: vec![
                DebugAnnotation {
                    name_iid: Some(1 << 33),
                    uint_value: Some(u64::MAX - 1),
                    string_value: None,
                    name: None,
                },
                DebugAnnotation {
                    name_iid: None,
                    uint_value: None,
                    string_value: Some("RAW from task 3".into()),
                    name: Some("deps".into()),
                },
            ],
            r#type: Some(EventType::Counter as i32),
            name_iid: Some(1 << 34),
            track_uuid: Some(u64::MAX - 2),
            name: None,
            counter_value: Some(-(1 << 40)),
        };
        let ours = TracePacket {
            timestamp: Some(1 << 50),
            trusted_packet_sequence_id: Some(u32::MAX - 3),
            track_event: Some(event),
            interned_data: Some(InternedData {
                event_names: vec![name(1 << 35, "gemm")],
                debug_annotation_names: vec![name(1 << 36, "epoch")],
            }),
            sequence_flags: Some(u32::MAX - 4),
            track_descriptor: None,
        };
        agree(&p, &ours);

        // The event's other name alternative.
        let mut e = oracle::track_event::TrackEvent::new();
        e.set_name("prepare".into());
        let ours = TrackEvent {
            name: Some("prepare".into()),
            ..Default::default()
        };
        agree(&e, &ours);

        // The packet's other `data` alternative.
        let mut pd = oracle::process_descriptor::ProcessDescriptor::new();
        pd.set_pid(-7);
        pd.set_process_name("chip 0".into());
        let mut td = oracle::thread_descriptor::ThreadDescriptor::new();
        td.set_pid(-8);
        td.set_thread_name("AIC 3".into());
        let mut t = oracle::track_descriptor::TrackDescriptor::new();
        t.set_uuid(u64::MAX - 5);
        t.set_name("runs".into());
        t.process = MessageField::some(pd);
        t.thread = MessageField::some(td);
        t.set_parent_uuid(u64::MAX - 6);
        t.counter = MessageField::some(Default::default());
        let mut p = oracle::trace_packet::TracePacket::new();
        p.set_track_descriptor(t);
        let ours = TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(u64::MAX - 5),
                name: Some("runs".into()),
                process: Some(ProcessDescriptor {
                    pid: Some(-7),
                    process_name: Some("chip 0".into()),
                }),
                thread: Some(ThreadDescriptor {
                    pid: Some(-8),
                    thread_name: Some("AIC 3".into()),
                }),
                parent_uuid: Some(u64::MAX - 6),
                counter: Some(CounterDescriptor {}),
            }),
            ..Default::default()
        };
        agree(&p, &ours);
    }

    #[test]
    fn event_types_and_packet_key_are_perfetto_s() {
        use oracle::track_event::track_event::Type;
        for (ours, theirs) in [
            (EventType::Unspecified, "TYPE_UNSPECIFIED"),
            (EventType::SliceBegin, "TYPE_SLICE_BEGIN"),
            (EventType::SliceEnd, "TYPE_SLICE_END"),
            (EventType::Instant, "TYPE_INSTANT"),
            (EventType::Counter, "TYPE_COUNTER"),
        ] {
            let v = Type::enum_descriptor().value_by_name(theirs).unwrap();
            assert_eq!(ours as i32, v.value(), "{theirs}");
        }
        assert_eq!(Type::default().value(), EventType::default() as i32);
        let mut t = oracle::trace::Trace::new();
        t.packet = vec![Default::default()];
        assert_eq!(
            protobuf::Message::write_to_bytes(&t).unwrap(),
            [PACKET_KEY, 0]
        );
    }

    #[test]
    fn packets_name_the_offset_of_what_is_broken() {
        let mut bytes = Vec::new();
        let mut third = 0;
        for ts in [1u64, 2, 3] {
            third = bytes.len();
            bytes.push(PACKET_KEY);
            let p = TracePacket {
                timestamp: Some(ts << 20),
                ..Default::default()
            };
            p.encode_length_delimited(&mut bytes).unwrap();
        }
        let ts: Vec<u64> = packets(&bytes).map(|p| p.unwrap().timestamp()).collect();
        assert_eq!(ts, [1 << 20, 2 << 20, 3 << 20]);
        let broken = |bytes: &[u8]| {
            let got: Vec<_> = packets(bytes).collect();
            assert!(got[..got.len() - 1].iter().all(Result::is_ok));
            match got.last() {
                Some(Err(TraceError::Protobuf { offset, problem })) => (*offset, *problem),
                other => panic!("not a protobuf error: {other:?}"),
            }
        };
        // Cut short inside the third packet's body, and inside its length.
        assert_eq!(
            broken(&bytes[..bytes.len() - 1]),
            (third, Corruption::Truncated)
        );
        assert_eq!(broken(&bytes[..third + 1]), (third, Corruption::Truncated));
        // A third packet whose timestamp is length-delimited.
        let mut bad = bytes.clone();
        bad[third + 2] = 8 << 3 | 2;
        assert_eq!(broken(&bad), (third, Corruption::BadPacket));
        // Text after the packets.
        let mut prose = bytes.clone();
        prose.extend(b"trailing prose");
        assert_eq!(broken(&prose), (bytes.len(), Corruption::NotAPacket));
        assert_eq!(
            TraceError::Protobuf {
                offset: 12,
                problem: Corruption::Truncated
            }
            .to_string(),
            "not a valid Perfetto trace: at byte 12, \
             the file ends inside the trace packet that starts there"
        );
    }
}
