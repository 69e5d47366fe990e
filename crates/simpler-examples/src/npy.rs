//! A minimal `.npy` writer: format version 1.0, little-endian `f32`, C order.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::Array;

/// The header dictionary of an `f32` C-order array of `shape`, padded with spaces and a final
/// newline so that magic + version + length + header is a multiple of 64 bytes.
fn header(shape: &[u64]) -> Vec<u8> {
    let dims = match shape {
        [] => String::new(),
        [n] => format!("{n},"),
        _ => shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({dims}), }}");
    // magic (6) + version (2) + u16 length (2) + dict + '\n' (1)
    while (6 + 2 + 2 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    dict.into_bytes()
}

/// Writes `a` to `path` as a `.npy` file (version 1.0, `'<f4'`, C order, `a.shape`).
///
/// Fails with `InvalidInput` if `a.data` does not hold exactly the product of `a.shape`
/// elements or the header would not fit a version-1.0 file, and with the I/O error otherwise.
pub fn write_npy(path: &Path, a: &Array) -> io::Result<()> {
    let numel: u64 = a.shape.iter().product();
    if numel != a.data.len() as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "array {:?}: shape {:?} holds {numel} elements but data has {}",
                a.name,
                a.shape,
                a.data.len()
            ),
        ));
    }
    let header = header(&a.shape);
    let header_len = u16::try_from(header.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("array {:?}: .npy v1.0 header too long", a.name),
        )
    })?;
    let mut w = BufWriter::new(File::create(path)?);
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&header_len.to_le_bytes())?;
    w.write_all(&header)?;
    for v in &a.data {
        w.write_all(&v.to_le_bytes())?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses a v1.0 `.npy` file by hand: (descr, fortran_order, shape, data).
    fn parse(bytes: &[u8]) -> (String, bool, Vec<u64>, Vec<f32>) {
        assert_eq!(&bytes[..6], b"\x93NUMPY", "magic");
        assert_eq!(&bytes[6..8], &[1, 0], "version 1.0");
        let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + len) % 64, 0, "header is 64-byte aligned");
        let dict = std::str::from_utf8(&bytes[10..10 + len]).unwrap();
        assert!(dict.ends_with('\n'));
        let field = |key: &str| {
            let start = dict
                .find(key)
                .unwrap_or_else(|| panic!("no {key} in {dict}"))
                + key.len();
            dict[start..].trim_start_matches([':', ' '])
        };
        let descr = field("'descr'").trim_start_matches('\'');
        let descr = descr[..descr.find('\'').unwrap()].to_string();
        let fortran = field("'fortran_order'").starts_with("True");
        let shape_text = field("'shape'");
        let shape_text = &shape_text[1..shape_text.find(')').unwrap()];
        let shape = shape_text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        let data = bytes[10 + len..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        (descr, fortran, shape, data)
    }

    fn roundtrip(a: &Array) -> Vec<u8> {
        let dir = std::env::temp_dir().join(format!(
            "simpler-examples-npy-{}-{}",
            std::process::id(),
            a.name
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.npy", a.name));
        write_npy(&path, a).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        bytes
    }

    #[test]
    fn header_and_data_parse_back() {
        for (name, shape) in [
            ("one_d", vec![5u64]),
            ("two_d", vec![2, 3]),
            ("three_d", vec![2, 1, 2]),
            ("scalar", vec![]),
            ("empty", vec![0, 4]),
        ] {
            let n: u64 = shape.iter().product();
            let data: Vec<f32> = (0..n).map(|i| i as f32 * -0.5 + 0.25).collect();
            let a = Array::new(name, shape.clone(), data.clone());
            let (descr, fortran, got_shape, got_data) = parse(&roundtrip(&a));
            assert_eq!(descr, "<f4", "{name}");
            assert!(!fortran, "{name}");
            assert_eq!(got_shape, shape, "{name}");
            assert_eq!(got_data, data, "{name}");
        }
    }

    #[test]
    fn the_shape_tuple_is_python_syntax() {
        let text = |shape: &[u64]| String::from_utf8(header(shape)).unwrap();
        assert!(text(&[7]).contains("'shape': (7,)"));
        assert!(text(&[2, 3]).contains("'shape': (2, 3)"));
        assert!(text(&[]).contains("'shape': ()"));
    }

    #[test]
    fn an_independent_reader_agrees() {
        let a = Array::new(
            "indep",
            vec![3, 2],
            vec![1.0, -2.0, 3.5, f32::MIN_POSITIVE, 0.0, 1e30],
        );
        let bytes = roundtrip(&a);
        let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
        assert_eq!(npy.shape(), &[3, 2]);
        assert_eq!(npy.order(), npyz::Order::C);
        assert_eq!(npy.into_vec::<f32>().unwrap(), a.data);
    }

    #[test]
    fn a_wrong_length_is_refused() {
        let a = Array {
            name: "bad".into(),
            shape: vec![2, 2],
            data: vec![0.0; 3],
        };
        let path = std::env::temp_dir().join("simpler-examples-npy-never-written.npy");
        let err = write_npy(&path, &a).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(!path.exists());
    }
}
