//! Tests of `.npy` reading and writing, cross-checked against `npyz`.

use super::*;
use npyz::WriterBuilder;

#[test]
fn a_deeply_nested_header_is_an_error_not_a_stack_overflow() {
    let header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': {}}}",
        "[".repeat(20_000)
    );
    let data = raw_file(&header, &[]);
    let err = parse(&data, Path::new("deep.npy")).unwrap_err().to_string();
    assert!(err.contains("nest deeper"), "{err}");
}

fn arr(shape: &[u64], dtype: DataType) -> NpyArray {
    let n = numel(shape).unwrap() as usize * dtype.size_bytes();
    NpyArray {
        shape: shape.to_vec(),
        dtype,
        bytes: (0..n).map(|i| (i * 7 + 3) as u8).collect(),
    }
}

/// A header-level file with the given header text (padded like NumPy does) and data.
fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.to_string();
    let pad = (64 - (10 + h.len() + 1) % 64) % 64;
    h.push_str(&" ".repeat(pad));
    h.push('\n');
    let mut out = NPY_MAGIC.to_vec();
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

fn p() -> &'static Path {
    Path::new("x.npy")
}

#[test]
fn round_trip_every_dtype_through_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let shapes: [&[u64]; 4] = [&[5], &[2, 3], &[2, 1, 4], &[]];
    for dtype in DataType::ALL {
        for shape in shapes {
            let a = arr(shape, dtype);
            let path = dir.path().join(format!("{dtype}.npy"));
            write(&path, &a).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            // Data is 64-byte aligned, as NumPy writes it.
            assert_eq!((bytes.len() - a.bytes.len()) % 64, 0);
            let back = read(&path).unwrap();
            // bf16 has no NumPy type and comes back as its raw u16 bits.
            let want_dtype = if dtype == DataType::Bfloat16 {
                DataType::Uint16
            } else {
                dtype
            };
            assert_eq!(back.dtype, want_dtype);
            assert_eq!(back.shape, a.shape);
            assert_eq!(back.bytes, a.bytes);
        }
    }
    // Only the written files are there: no temporary files left behind.
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        DataType::ALL.len()
    );
}

#[test]
fn files_we_write_read_back_with_npyz() {
    let a = NpyArray {
        shape: vec![2, 3],
        dtype: DataType::Float32,
        bytes: [1.5f32, -2.0, 3.25, 0.0, 1e-3, 7.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    };
    let bytes = encode(&a);
    let f = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(f.shape(), &[2, 3]);
    assert_eq!(f.order(), npyz::Order::C);
    assert_eq!(
        f.into_vec::<f32>().unwrap(),
        vec![1.5, -2.0, 3.25, 0.0, 1e-3, 7.0]
    );
    let b = NpyArray {
        shape: vec![4],
        dtype: DataType::Int64,
        bytes: [-1i64, 2, i64::MIN, i64::MAX]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    };
    let eb = encode(&b);
    let f = npyz::NpyFile::new(&eb[..]).unwrap();
    assert_eq!(f.shape(), &[4]);
    assert_eq!(
        f.into_vec::<i64>().unwrap(),
        vec![-1, 2, i64::MIN, i64::MAX]
    );
}

#[test]
fn half_precision_files_are_numpy_f2() {
    let a = NpyArray {
        shape: vec![2],
        dtype: DataType::Float16,
        bytes: vec![0x00, 0x3c, 0x00, 0xc0],
    };
    let bytes = encode(&a);
    let f = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(f.dtype().descr(), "'<f2'");
    let v: Vec<half::f16> = f.into_vec().unwrap();
    assert_eq!(v, [half::f16::ONE, half::f16::from_f32(-2.0)]);
    assert_eq!(parse(&bytes, p()).unwrap(), a);
}

#[test]
fn unclosed_headers_are_malformed() {
    for h in [
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)",
        "{'descr': '<f4",
    ] {
        let e = parse(&raw_file(h, &[0; 4]), p()).unwrap_err();
        assert!(e.to_string().contains("end of the header"), "{e}");
    }
}

#[test]
fn files_npyz_writes_read_back_here() {
    fn npyz_bytes<T: npyz::AutoSerialize>(shape: &[u64], data: Vec<T>) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(shape)
            .writer(&mut buf)
            .begin_nd()
            .unwrap();
        w.extend(data).unwrap();
        w.finish().unwrap();
        buf
    }
    let a = parse(&npyz_bytes(&[2, 2], vec![1.0f32, 2.0, 3.0, 4.0]), p()).unwrap();
    assert_eq!((a.dtype, a.shape.clone()), (DataType::Float32, vec![2, 2]));
    assert_eq!(
        a.bytes,
        [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>()
    );
    let a = parse(&npyz_bytes(&[3], vec![1u8, 2, 255]), p()).unwrap();
    assert_eq!((a.dtype, a.bytes), (DataType::Uint8, vec![1, 2, 255]));
    let a = parse(&npyz_bytes(&[1, 2], vec![-5i16, 300]), p()).unwrap();
    assert_eq!(a.dtype, DataType::Int16);
    assert_eq!(
        a.bytes,
        [-5i16, 300]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>()
    );
    let a = parse(&npyz_bytes(&[2], vec![7u32, 9]), p()).unwrap();
    assert_eq!(a.dtype, DataType::Uint32);
}

#[test]
fn accepts_numpy_header_variants() {
    // Double quotes, no trailing comma, keys in another order, Python 2 longs.
    let f = raw_file(
        "{\"shape\": (2L, 1), \"fortran_order\": False, \"descr\": \"<i4\"}",
        &[0; 8],
    );
    let a = parse(&f, p()).unwrap();
    assert_eq!((a.dtype, a.shape), (DataType::Int32, vec![2, 1]));
    // Fortran order is harmless when only one dimension is longer than 1.
    let f = raw_file(
        "{'descr': '<f2', 'fortran_order': True, 'shape': (1, 3), }",
        &[0; 6],
    );
    assert_eq!(parse(&f, p()).unwrap().shape, vec![1, 3]);
    // A one-byte type with `<` is the same as `|`.
    let f = raw_file(
        "{'descr': '<u1', 'fortran_order': False, 'shape': (2,), }",
        &[1, 2],
    );
    assert_eq!(parse(&f, p()).unwrap().dtype, DataType::Uint8);
    // Version 2.0 and 3.0 headers.
    for major in [2u8, 3] {
        let h = "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }\n";
        let mut f = NPY_MAGIC.to_vec();
        f.extend_from_slice(&[major, 0]);
        f.extend_from_slice(&(h.len() as u32).to_le_bytes());
        f.extend_from_slice(h.as_bytes());
        f.extend_from_slice(&42i64.to_le_bytes());
        assert_eq!(parse(&f, p()).unwrap().dtype, DataType::Int64);
    }
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = read(&dir.path().join("nope.npy")).unwrap_err();
    assert!(matches!(e, NpyError::Missing { .. }), "{e:?}");
    assert!(e.to_string().contains("nope.npy"), "{e}");
}

#[test]
fn bad_magic() {
    for data in [&b"PK\x03\x04 a zip"[..], b"", b"\x93NUM"] {
        let e = parse(data, p()).unwrap_err();
        assert!(matches!(e, NpyError::BadMagic { .. }), "{e:?}");
        assert!(
            e.to_string().contains("x.npy") && e.to_string().contains("not a .npy"),
            "{e}"
        );
    }
}

#[test]
fn malformed_headers() {
    let good = encode(&arr(&[2], DataType::Float32));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (good[..7].to_vec(), "version"),
        (
            {
                let mut f = good.clone();
                f[6] = 9;
                f
            },
            "version 9.0",
        ),
        (good[..9].to_vec(), "header length"),
        (good[..40].to_vec(), "claims"),
        (
            raw_file("{'descr': '<f4', 'fortran_order': False}", &[]),
            "no `shape`",
        ),
        (
            raw_file(
                "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}",
                &[0; 4],
            ),
            "True or False",
        ),
        (
            raw_file(
                "{'descr': '<f4', 'fortran_order': False, 'shape': [1]}",
                &[0; 4],
            ),
            "not a tuple",
        ),
        (
            raw_file(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",
                &[0; 4],
            ),
            "key `x`",
        ),
        (
            raw_file(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,",
                &[0; 4],
            ),
            "end of the header",
        ),
        (raw_file("['descr']", &[]), "not a dict"),
        (raw_file("{'descr': <f4}", &[]), "unexpected `<`"),
    ];
    for (data, want) in cases {
        let e = parse(&data, p()).unwrap_err();
        assert!(
            matches!(e, NpyError::MalformedHeader { .. }),
            "{want}: {e:?}"
        );
        assert!(e.to_string().contains(want), "want {want:?} in: {e}");
    }
}

#[test]
fn unsupported_dtypes() {
    let h = |d: &str| {
        raw_file(
            &format!("{{'descr': '{d}', 'fortran_order': False, 'shape': (1,), }}"),
            &[0; 8],
        )
    };
    assert_eq!(parse(&h("<f8"), p()).unwrap().dtype, DataType::Float64);
    let e = parse(&h("|b1"), p()).unwrap_err();
    assert!(e.to_string().contains("bool is not supported"), "{e}");
    let e = parse(&h("<c8"), p()).unwrap_err();
    assert!(e.to_string().contains("`<c8` is not supported"), "{e}");
    let e = parse(
        &raw_file(
            "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
            &[0; 4],
        ),
        p(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("structured"), "{e}");
}

#[test]
fn big_endian_is_rejected() {
    let f = raw_file(
        "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
        &[0; 8],
    );
    let e = parse(&f, p()).unwrap_err();
    assert!(matches!(e, NpyError::BigEndian { .. }), "{e:?}");
    assert!(e.to_string().contains("big-endian"), "{e}");
    // A one-byte type has no byte order.
    let f = raw_file(
        "{'descr': '>u1', 'fortran_order': False, 'shape': (2,), }",
        &[0; 2],
    );
    assert!(parse(&f, p()).is_ok());
}

#[test]
fn fortran_order_is_rejected() {
    let f = raw_file(
        "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
        &[0; 24],
    );
    let e = parse(&f, p()).unwrap_err();
    assert!(matches!(e, NpyError::FortranOrder { .. }), "{e:?}");
    assert!(e.to_string().contains("Fortran order"), "{e}");
}

#[test]
fn data_length_mismatch() {
    let mut f = encode(&arr(&[2, 3], DataType::Int32));
    f.pop();
    let e = parse(&f, p()).unwrap_err();
    match &e {
        NpyError::DataLength { expected, got, .. } => assert_eq!((*expected, *got), (24, 23)),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("needs 24 bytes, got 23"), "{e}");
    f.extend_from_slice(&[0, 0]);
    assert!(matches!(
        parse(&f, p()).unwrap_err(),
        NpyError::DataLength { .. }
    ));
    // Writing refuses too, and leaves nothing behind.
    let dir = tempfile::tempdir().unwrap();
    let mut a = arr(&[2], DataType::Float32);
    a.bytes.pop();
    let e = write(&dir.path().join("o.npy"), &a).unwrap_err();
    assert!(matches!(e, NpyError::DataLength { .. }), "{e:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn write_replaces_atomically_and_reports_io_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.npy");
    std::fs::write(&path, b"old").unwrap();
    write(&path, &arr(&[3], DataType::Uint8)).unwrap();
    assert_eq!(read(&path).unwrap().shape, vec![3]);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let e = write(
        &dir.path().join("missing-dir/o.npy"),
        &arr(&[3], DataType::Uint8),
    )
    .unwrap_err();
    assert!(matches!(e, NpyError::Io { op: "write", .. }), "{e:?}");
    assert!(e.to_string().contains("missing-dir"), "{e}");
}

#[test]
fn read_refuses_devices_fifos_and_directories_at_open() {
    let dir = tempfile::tempdir().unwrap();
    for (path, kind) in simpler_test_support::files::non_regular(dir.path(), "in.npy") {
        // A FIFO with no writer returns at once (a blocking open would hang this test).
        let e = read(&path).unwrap_err();
        assert!(
            matches!(&e, NpyError::NotRegular { kind: k, .. } if *k == kind),
            "{e:?}"
        );
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }
    let e = read(&dir.path().join("none.npy")).unwrap_err();
    assert!(matches!(e, NpyError::Missing { .. }), "{e:?}");
}

#[test]
fn read_takes_exactly_what_the_header_declares() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.npy");
    let good = encode(&arr(&[2, 3], DataType::Int32));
    std::fs::write(&path, &good).unwrap();
    assert_eq!(read(&path).unwrap(), arr(&[2, 3], DataType::Int32));
    // The file holds more than the header declares.
    let mut longer = good.clone();
    longer.extend_from_slice(&[0; 1000]);
    std::fs::write(&path, &longer).unwrap();
    match read(&path).unwrap_err() {
        NpyError::DataLength { expected, got, .. } => assert_eq!((expected, got), (24, 1024)),
        other => panic!("{other:?}"),
    }
    // Less.
    std::fs::write(&path, &good[..good.len() - 5]).unwrap();
    match read(&path).unwrap_err() {
        NpyError::DataLength { expected, got, .. } => assert_eq!((expected, got), (24, 19)),
        other => panic!("{other:?}"),
    }
    // A header length past the file, and one over the header limit.
    std::fs::write(&path, &good[..40]).unwrap();
    let e = read(&path).unwrap_err().to_string();
    assert!(e.contains("claims"), "{e}");
    let mut huge = good.clone();
    huge[6] = 2;
    huge[8..12].copy_from_slice(&(MAX_HEADER_BYTES as u32 + 1).to_le_bytes());
    std::fs::write(&path, &huge).unwrap();
    let e = read(&path).unwrap_err();
    assert!(matches!(e, NpyError::MalformedHeader { .. }), "{e:?}");
    assert!(e.to_string().contains("more than the 65536"), "{e}");
}

#[test]
fn read_refuses_data_over_the_limit_before_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.npy");
    std::fs::write(&path, encode(&arr(&[4, 4], DataType::Float32))).unwrap();
    assert_eq!(read_limited(&path, 64).unwrap().bytes.len(), 64);
    let e = read_limited(&path, 63).unwrap_err();
    assert!(
        matches!(
            e,
            NpyError::TooLarge {
                declared: 64,
                limit: 63,
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("a.npy") && msg.contains("64 bytes") && msg.contains("63"),
        "{msg}"
    );
}

/// A header whose shape's byte count overflows `u64` is refused naming the shape and the
/// limit, never a saturated byte count; a declared size over the limit is refused with the
/// size the header declares, before its (missing) data is compared.
#[test]
fn an_overflowing_or_over_limit_declared_size_is_named_without_saturation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.npy");
    for shape in ["(4294967296, 4294967296)", "(18446744073709551615,)"] {
        let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
        std::fs::write(&path, raw_file(&header, &[])).unwrap();
        let e = read(&path).unwrap_err();
        assert!(
            matches!(
                &e,
                NpyError::SizeOverflow {
                    limit: Some(MAX_DATA_BYTES),
                    dtype: DataType::Float32,
                    ..
                }
            ),
            "{shape}: {e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("huge.npy")
                && msg.contains("does not fit in 64 bits")
                && msg.contains(&MAX_DATA_BYTES.to_string())
                && !msg.contains(&format!("{} bytes", u64::MAX)),
            "{shape}: {msg}"
        );
        // In memory too, without a limit to name.
        let e = parse(&raw_file(&header, &[]), p()).unwrap_err();
        assert!(
            matches!(e, NpyError::SizeOverflow { limit: None, .. }),
            "{e:?}"
        );
        assert!(!e.to_string().contains("at most"), "{e}");
    }
    // 8 GiB declared, no data: over the limit, by the size declared.
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2147483648,), }";
    std::fs::write(&path, raw_file(header, &[])).unwrap();
    let e = read(&path).unwrap_err();
    assert!(
        matches!(
            e,
            NpyError::TooLarge {
                declared: 8589934592,
                limit: MAX_DATA_BYTES,
                ..
            }
        ),
        "{e:?}"
    );
    // Writing an array of an overflowing shape is refused the same way.
    let a = NpyArray {
        shape: vec![u64::MAX, 2],
        dtype: DataType::Uint8,
        bytes: vec![],
    };
    let e = write(&dir.path().join("o.npy"), &a).unwrap_err();
    assert!(
        matches!(e, NpyError::SizeOverflow { limit: None, .. }),
        "{e:?}"
    );
    assert!(!dir.path().join("o.npy").exists());
}
