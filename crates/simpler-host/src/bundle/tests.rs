//! Unit tests of the bundle format: round trips, every frame and content error.

use super::frame::read_u32;
use super::*;
use crate::SignatureError;
use crate::{ArgDirection, ArgSpec};
use simpler_abi::CoreType;
use simpler_abi::DataType;

fn image(tag: u8, len: usize) -> Vec<u8> {
    let mut v = ELF_MAGIC.to_vec();
    v.extend((0..len).map(|i| tag.wrapping_add(i as u8)));
    v
}

fn sample() -> Bundle {
    Bundle {
        name: "gemm".into(),
        signature: Signature::new(vec![
            ArgSpec {
                name: "A".into(),
                direction: ArgDirection::In,
                dtype: DataType::Float32,
                shape: Some(vec![4, 4]),
            },
            ArgSpec {
                name: "C".into(),
                direction: ArgDirection::Out,
                dtype: DataType::Float32,
                shape: None,
            },
            ArgSpec {
                name: "alpha".into(),
                direction: ArgDirection::Scalar,
                dtype: DataType::Float32,
                shape: None,
            },
        ])
        .unwrap(),
        orchestration: BundleCode {
            entry: "aicpu_orchestration_entry".into(),
            image: image(1, 300),
        },
        kernels: vec![
            BundleKernel {
                func_id: 0,
                core_type: CoreType::Aic,
                name: "kernel_entry".into(),
                code: BundleCode {
                    entry: "kernel_entry".into(),
                    image: image(2, 200),
                },
            },
            BundleKernel {
                func_id: 7,
                core_type: CoreType::Aiv,
                name: "vec_entry".into(),
                code: BundleCode {
                    entry: "vec_entry".into(),
                    image: image(3, 100),
                },
            },
        ],
        runtime: None,
    }
}

fn meta_len(bytes: &[u8]) -> usize {
    read_u32(bytes, 12) as usize
}

/// Rewrites the metadata JSON of a serialized bundle and fixes up length and CRC, so the
/// frame is valid and only the content is wrong.
fn with_metadata(bytes: &[u8], f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let ml = meta_len(bytes);
    let mut v: serde_json::Value = serde_json::from_slice(&bytes[16..16 + ml]).unwrap();
    f(&mut v);
    let json = serde_json::to_vec(&v).unwrap();
    reframe(bytes, &json)
}

fn reframe(bytes: &[u8], json: &[u8]) -> Vec<u8> {
    let ml = meta_len(bytes);
    let mut out = bytes[..12].to_vec();
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(json);
    out.extend_from_slice(&bytes[16 + ml..bytes.len() - 4]);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn round_trip() {
    let b = sample();
    let bytes = b.to_bytes();
    assert_eq!(&bytes[..8], BUNDLE_MAGIC);
    assert_eq!(read_u32(&bytes, 8), 1);
    let back = Bundle::from_bytes(&bytes).unwrap();
    assert_eq!(back, b);
    // Serialization is deterministic.
    assert_eq!(back.to_bytes(), bytes);
}

#[test]
fn round_trip_without_kernels() {
    let b = Bundle {
        kernels: vec![],
        signature: Signature::default(),
        ..sample()
    };
    assert_eq!(Bundle::from_bytes(&b.to_bytes()).unwrap(), b);
}

#[test]
fn into_spec_keeps_everything() {
    let spec = sample().into_spec();
    assert_eq!(spec.name, "gemm");
    assert_eq!(spec.signature, sample().signature);
    match &spec.orchestration {
        CodeImage::Library { bytes, entry } => {
            assert_eq!(entry, "aicpu_orchestration_entry");
            assert_eq!(bytes, &image(1, 300));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(spec.kernels.len(), 2);
    assert_eq!(spec.kernels[1].func_id, 7);
    assert_eq!(spec.kernels[1].core_type, CoreType::Aiv);
    match &spec.kernels[1].image {
        CodeImage::Library { bytes, entry } => {
            assert_eq!(entry, "vec_entry");
            assert_eq!(bytes, &image(3, 100));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_runtime_round_trips_and_reaches_the_spec() {
    for runtime in Runtime::ALL {
        let b = Bundle {
            runtime: Some(runtime),
            ..sample()
        };
        let back = Bundle::from_bytes(&b.to_bytes()).unwrap();
        assert_eq!(back.runtime, Some(runtime));
        assert_eq!(back.into_spec().runtime, Some(runtime));
    }
    assert_eq!(sample().into_spec().runtime, None);
}

#[test]
fn a_bundle_without_a_runtime_has_no_runtime_field() {
    let plain = sample().to_bytes();
    let ml = meta_len(&plain);
    let meta = std::str::from_utf8(&plain[16..16 + ml]).unwrap();
    assert!(!meta.contains("runtime"), "{meta}");
    // Naming one adds exactly the field, at the end of the metadata, and nothing else.
    let hbg = Bundle {
        runtime: Some(Runtime::HostBuildGraph),
        ..sample()
    }
    .to_bytes();
    let with = with_metadata(&plain, |v| {
        v["runtime"] = "host_build_graph".into();
    });
    assert_eq!(
        Bundle::from_bytes(&with).unwrap(),
        Bundle::from_bytes(&hbg).unwrap()
    );
    let hbg_meta = std::str::from_utf8(&hbg[16..16 + meta_len(&hbg)]).unwrap();
    assert_eq!(
        hbg_meta,
        format!(
            "{},\"runtime\":\"host_build_graph\"}}",
            &meta[..meta.len() - 1]
        )
    );
    assert_eq!(
        hbg[16 + meta_len(&hbg)..hbg.len() - 4],
        plain[16 + ml..plain.len() - 4]
    );
}

#[test]
fn an_unknown_runtime_is_refused_naming_it_and_the_runtimes() {
    let bad = with_metadata(&sample().to_bytes(), |v| {
        v["runtime"] = "hbg".into();
    });
    let e = Bundle::from_bytes(&bad).unwrap_err();
    match &e {
        BundleError::UnknownRuntime { found, .. } => assert_eq!(found, "hbg"),
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("`runtime`")
            && msg.contains("`hbg`")
            && msg.contains("tensormap_and_ringbuffer")
            && msg.contains("host_build_graph"),
        "{msg}"
    );
    // Not a string at all: the metadata is malformed.
    let bad = with_metadata(&sample().to_bytes(), |v| {
        v["runtime"] = 1.into();
    });
    let e = Bundle::from_bytes(&bad).unwrap_err();
    assert!(matches!(e, BundleError::MalformedMetadata { .. }), "{e:?}");
}

#[test]
fn bad_magic() {
    let mut bytes = sample().to_bytes();
    bytes[0] = b'X';
    let e = Bundle::from_bytes(&bytes).unwrap_err();
    assert!(matches!(e, BundleError::BadMagic { .. }), "{e:?}");
    assert!(e.to_string().contains("not a simpler bundle"), "{e}");
    // A short file that is not a prefix of the magic is not a bundle either.
    let e = Bundle::from_bytes(b"\x7fELF").unwrap_err();
    assert!(matches!(e, BundleError::BadMagic { .. }), "{e:?}");
}

#[test]
fn unsupported_version() {
    let mut bytes = sample().to_bytes();
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    let e = Bundle::from_bytes(&bytes).unwrap_err();
    assert!(
        matches!(
            e,
            BundleError::UnsupportedVersion {
                found: 2,
                supported: 1
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("version 2") && msg.contains("version 1"),
        "{msg}"
    );
}

#[test]
fn truncated_at_every_region() {
    let bytes = sample().to_bytes();
    let ml = meta_len(&bytes);
    let cuts = [
        0,
        3,
        8,
        10,
        12,
        15,
        16,
        16 + ml / 2,
        16 + ml,
        16 + ml + 1,
        16 + ml + 150,
        bytes.len() - 150,
        bytes.len() - 4,
        bytes.len() - 1,
    ];
    for cut in cuts {
        let e = Bundle::from_bytes(&bytes[..cut]).unwrap_err();
        match e {
            BundleError::Truncated { expected, got } => {
                assert_eq!(got, cut as u64);
                assert!(expected > got, "cut {cut}: expected {expected}");
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    // Once the metadata is readable the full length is known exactly.
    let e = Bundle::from_bytes(&bytes[..bytes.len() - 1]).unwrap_err();
    assert!(
        e.to_string().contains(&format!(
            "expected {} bytes, got {}",
            bytes.len(),
            bytes.len() - 1
        )),
        "{e}"
    );
}

#[test]
fn checksum_mismatch_on_a_flipped_byte() {
    let bytes = sample().to_bytes();
    let ml = meta_len(&bytes);
    // In the images, in the CRC itself, and inside the metadata JSON.
    for at in [16 + ml + 250, bytes.len() - 2, 16 + 3] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x5a;
        let e = Bundle::from_bytes(&bad).unwrap_err();
        assert!(
            matches!(e, BundleError::ChecksumMismatch { .. }),
            "flip at {at}: {e:?}"
        );
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
    }
}

#[test]
fn malformed_metadata() {
    let bytes = sample().to_bytes();
    // Not JSON at all, with a valid checksum.
    let e = Bundle::from_bytes(&reframe(&bytes, b"{not json")).unwrap_err();
    assert!(matches!(e, BundleError::MalformedMetadata { .. }), "{e:?}");
    // JSON, but an unknown field.
    let bad = with_metadata(&bytes, |v| {
        v["extra"] = 1.into();
    });
    let e = Bundle::from_bytes(&bad).unwrap_err();
    assert!(matches!(e, BundleError::MalformedMetadata { .. }), "{e:?}");
    assert!(e.to_string().contains("extra"), "{e}");
    // An unknown core type.
    let bad = with_metadata(&bytes, |v| {
        v["kernels"][0]["core"] = "gpu".into();
    });
    let e = Bundle::from_bytes(&bad).unwrap_err();
    assert!(e.to_string().contains("unknown core type `gpu`"), "{e}");
    // Sizes that overflow.
    let bad = with_metadata(&bytes, |v| {
        v["kernels"][0]["size"] = u64::MAX.into();
    });
    let e = Bundle::from_bytes(&bad).unwrap_err();
    assert!(matches!(e, BundleError::MalformedMetadata { .. }), "{e:?}");
}

#[test]
fn invalid_signature() {
    let mut b = sample();
    b.signature.args[1].name = "A".into();
    let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
    match &e {
        BundleError::InvalidSignature(SignatureError::DuplicateName(n)) => assert_eq!(n, "A"),
        other => panic!("{other:?}"),
    }
    let src = std::error::Error::source(&e).unwrap().to_string();
    assert!(src.contains("`A` appears twice"), "{src}");
}

#[test]
fn duplicate_func_id() {
    let mut b = sample();
    b.kernels[1].func_id = 0;
    let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
    assert!(
        matches!(e, BundleError::DuplicateFuncId { func_id: 0 }),
        "{e:?}"
    );
}

#[test]
fn func_id_out_of_range() {
    let mut b = sample();
    b.kernels[1].func_id = simpler_abi::MAX_FUNC_ID as u32;
    let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
    assert!(
        matches!(
            e,
            BundleError::FuncIdOutOfRange {
                func_id: 1024,
                max: 1024
            }
        ),
        "{e:?}"
    );
    b.kernels[1].func_id = simpler_abi::MAX_FUNC_ID as u32 - 1;
    assert!(Bundle::from_bytes(&b.to_bytes()).is_ok());
}

#[test]
fn empty_name_and_entry() {
    let mut b = sample();
    b.name.clear();
    let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
    assert!(matches!(e, BundleError::EmptyName), "{e:?}");
    let mut b = sample();
    b.kernels[0].code.entry.clear();
    let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
    assert!(matches!(e, BundleError::EmptyEntry { .. }), "{e:?}");
    assert!(e.to_string().contains("kernel func_id 0"), "{e}");
}

#[test]
fn empty_image() {
    let mut b = sample();
    b.orchestration.image.clear();
    let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
    assert!(matches!(e, BundleError::EmptyImage { .. }), "{e:?}");
    assert!(e.to_string().contains("orchestration"), "{e}");
}

#[test]
fn not_elf() {
    let mut b = sample();
    b.kernels[1].code.image = b"MZ\x90\x00 a PE file".to_vec();
    let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
    assert!(matches!(e, BundleError::NotElf { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("kernel func_id 7") && msg.contains("not an ELF shared object"),
        "{msg}"
    );
    // Shorter than the magic.
    b.kernels[1].code.image = b"\x7fE".to_vec();
    let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
    assert!(matches!(e, BundleError::NotElf { .. }), "{e:?}");
}

#[test]
fn trailing_bytes() {
    let mut bytes = sample().to_bytes();
    bytes.extend_from_slice(b"junk");
    let e = Bundle::from_bytes(&bytes).unwrap_err();
    assert!(
        matches!(e, BundleError::TrailingBytes { count: 4 }),
        "{e:?}"
    );
}

#[test]
fn declared_sizes_that_do_not_fit_are_caught() {
    // Metadata that claims a bigger image, with a checksum that covers the file as is.
    let bytes = sample().to_bytes();
    let bad = with_metadata(&bytes, |v| {
        let n = v["orchestration"]["size"].as_u64().unwrap();
        v["orchestration"]["size"] = (n + 1).into();
    });
    let e = Bundle::from_bytes(&bad).unwrap_err();
    // One byte has moved from the CRC into the last image, so the frame is short by one.
    assert!(matches!(e, BundleError::Truncated { .. }), "{e:?}");
    // Claiming a smaller image leaves the CRC at the wrong place.
    let bad = with_metadata(&bytes, |v| {
        let n = v["orchestration"]["size"].as_u64().unwrap();
        v["orchestration"]["size"] = (n - 1).into();
    });
    let e = Bundle::from_bytes(&bad).unwrap_err();
    assert!(matches!(e, BundleError::ChecksumMismatch { .. }), "{e:?}");
}

#[test]
fn io_error_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.simpler");
    let e = Bundle::read(&missing).unwrap_err();
    assert!(matches!(e, BundleError::Read { .. }), "{e:?}");
    assert!(e.to_string().contains("nope.simpler"), "{e}");
    let e = sample()
        .write(dir.path().join("no-such-dir").join("x.simpler"))
        .unwrap_err();
    assert!(matches!(e, BundleError::Io { op: "write", .. }), "{e:?}");
    assert!(e.to_string().contains("no-such-dir"), "{e}");
}

fn dir_entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn write_is_atomic_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gemm.simpler");
    let b = sample();
    b.write(&path).unwrap();
    assert_eq!(dir_entries(dir.path()), vec!["gemm.simpler".to_string()]);
    assert_eq!(Bundle::read(&path).unwrap(), b);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
    }

    // Overwriting replaces the file.
    let mut b2 = sample();
    b2.name = "other".into();
    b2.write(&path).unwrap();
    assert_eq!(Bundle::read(&path).unwrap(), b2);

    // A bundle that fails validation does not touch the destination.
    let before = std::fs::read(&path).unwrap();
    let mut bad = sample();
    bad.kernels[1].func_id = 0;
    let e = bad.write(&path).unwrap_err();
    assert!(matches!(e, BundleError::DuplicateFuncId { .. }), "{e:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(dir_entries(dir.path()), vec!["gemm.simpler".to_string()]);
}

#[test]
fn reading_refuses_devices_fifos_and_directories() {
    let dir = tempfile::tempdir().unwrap();
    for (path, kind) in simpler_test_support::files::non_regular(dir.path(), "fifo.simpler") {
        let e = Bundle::read(&path).unwrap_err();
        let BundleError::Read { source, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(
            matches!(source, crate::fsio::ReadFileError::NotRegular { kind: k, .. } if *k == kind),
            "{source:?}"
        );
    }
}

#[test]
fn a_kernel_named_after_its_entry_writes_no_name_and_another_name_round_trips() {
    let b = sample();
    let json = |b: &Bundle| {
        let bytes = b.to_bytes();
        let len = read_u32(&bytes, 12) as usize;
        String::from_utf8(bytes[PREFIX_LEN..PREFIX_LEN + len].to_vec()).unwrap()
    };
    assert!(
        !json(&b).contains("\"name\":\"kernel_entry\""),
        "{}",
        json(&b)
    );
    let mut named = b.clone();
    named.kernels[0].name = "gemm_tile".into();
    assert!(
        json(&named).contains("\"entry\":\"kernel_entry\",\"name\":\"gemm_tile\""),
        "{}",
        json(&named)
    );
    let back = Bundle::from_bytes(&named.to_bytes()).unwrap();
    assert_eq!(back, named);
    assert_eq!(back.kernels[0].name, "gemm_tile");
    assert_eq!(back.kernels[1].name, "vec_entry");
    let spec = back.into_spec();
    assert_eq!(spec.kernels[0].name.as_deref(), Some("gemm_tile"));
    assert_eq!(spec.kernels[0].display_name(), "gemm_tile");
}

/// A bundle as written before kernels had names: its metadata, with the images.
fn unnamed_bundle_bytes() -> Vec<u8> {
    let meta = br#"{"name":"old","signature":[],"orchestration":{"entry":"o","size":8},"kernels":[{"func_id":0,"core":"aic","entry":"kernel_entry","size":8},{"func_id":1,"core":"aiv","entry":"other","size":8}]}"#;
    let mut out = BUNDLE_MAGIC.to_vec();
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(meta);
    for tag in 0..3u8 {
        out.extend_from_slice(ELF_MAGIC);
        out.extend_from_slice(&[tag; 4]);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn a_bundle_without_kernel_names_loads_with_each_kernel_named_after_its_entry() {
    let bytes = unnamed_bundle_bytes();
    let b = Bundle::from_bytes(&bytes).unwrap();
    assert_eq!(b.kernels[0].name, "kernel_entry");
    assert_eq!(b.kernels[1].name, "other");
    // Written back, it has the bytes it was read from.
    assert_eq!(b.to_bytes(), bytes);
}

#[test]
fn duplicate_and_invalid_kernel_names_are_refused() {
    let mut b = sample();
    // Kernels sharing an entry symbol without names of their own are valid (their default
    // names are qualified at registration), and so is a given name equal to another
    // kernel's default.
    b.kernels[1].code.entry = "kernel_entry".into();
    b.kernels[1].name = "kernel_entry".into();
    b.validate().unwrap();
    b.kernels[1].code.entry = "vec_entry".into();
    b.validate().unwrap();
    // Two given names that agree are refused.
    b.kernels[0].name = "same".into();
    b.kernels[1].name = "same".into();
    let e = b.validate().unwrap_err();
    assert!(
        matches!(&e, BundleError::DuplicateKernelName { name, first: 0, second: 7 } if name == "same"),
        "{e:?}"
    );
    assert!(e.to_string().contains("func_id 0 and func_id 7"), "{e}");
    // The reader refuses it too.
    let bytes = b.to_bytes();
    assert!(matches!(
        Bundle::from_bytes(&bytes),
        Err(BundleError::DuplicateKernelName { .. })
    ));
    b.kernels[1].name = "a\nb".into();
    let e = b.validate().unwrap_err();
    assert!(
        matches!(
            &e,
            BundleError::InvalidKernelName {
                func_id: 7,
                reason: crate::KernelNameError::ControlCharacter { .. }
            }
        ),
        "{e:?}"
    );
    // A name with a zero-width or bidi character (an old bundle written before the rule):
    // refused by the reader, naming the kernel and the character.
    for (name, code) in [("qk\u{200B}", "U+200B"), ("qk\u{202E}x", "U+202E")] {
        b.kernels[1].name = name.into();
        let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
        assert!(
            matches!(
                &e,
                BundleError::InvalidKernelName {
                    func_id: 7,
                    reason: crate::KernelNameError::HiddenCharacter { .. }
                }
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains("func_id 7") && msg.contains(code), "{msg}");
    }
    b.kernels[1].name = "   ".into();
    assert!(matches!(
        b.validate(),
        Err(BundleError::InvalidKernelName {
            reason: crate::KernelNameError::Blank { .. },
            ..
        })
    ));
    b.kernels[1].name = "矩阵乘".into();
    assert!(b.validate().is_ok());
    assert!(Bundle::from_bytes(&b.to_bytes()).is_ok());
    b.kernels[1].name = String::new();
    assert!(e.to_string().contains("func_id 7"), "{e}");
    assert!(matches!(
        b.validate(),
        Err(BundleError::InvalidKernelName {
            reason: crate::KernelNameError::Empty,
            ..
        })
    ));
}
