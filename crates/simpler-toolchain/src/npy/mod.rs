//! NumPy `.npy` files: how `simpler run` takes its input tensors and hands back its outputs,
//! and how the example data is written. This module owns reading a file into an
//! [`NpyArray`] (shape, [`DataType`], raw little-endian C-order bytes) and writing one back,
//! atomically (through [`simpler_host::fsio`]); `docs/toolchain.md` ("`.npy` files")
//! describes what is accepted.
//!
//! The format (NumPy's `format.py`, versions 1.0, 2.0 and 3.0): the magic `\x93NUMPY`, a
//! major and a minor version byte, the header length (`u16` LE for 1.x, `u32` LE for 2.x and
//! 3.x), then the header — a Python dict literal
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }` in Latin-1 (UTF-8 for 3.x),
//! padded with spaces and a final `\n` so that the data starts on a 64-byte boundary — then
//! the raw elements.
//!
//! Writing goes through `npyz`. Reading parses the header literal with `py_literal` (the
//! parser `npyz` itself uses) and the type string with [`npyz::TypeStr`], but checks the
//! dict here rather than through `npyz::NpyHeader`. Measured against `npyz` 0.8, that one
//! accepts headers NumPy refuses (keys other than `descr`, `fortran_order` and `shape`; a
//! list as the shape), refuses the `2L` integers of files written by Python 2 that NumPy
//! still reads, and reports every rejection as untyped `io::Error` text (for a header of
//! 20 000 open brackets, 20 KB of it), where the CLI names the reason ([`NpyError`]). A
//! header nesting brackets deeper than [`MAX_HEADER_NESTING`] levels is refused before it
//! is parsed.
//!
//! Matching a file to a signature argument is the caller's job; this module only reads
//! and writes files.
//!
//! Accepted element types are the [`DataType`]s NumPy can express: `f4`, `f2`, `i1`, `i2`,
//! `i4`, `i8`, `u1`, `u2`, `u4`, `u8`, little-endian (or `|` for one-byte types). `bf16` has no
//! NumPy type: a bf16 tensor travels as `<u2` holding the raw bits, and writing an
//! [`NpyArray`] of dtype bf16 produces `<u2`. Rejected with their own message: `float64`
//! ("convert to float32"), big-endian data, Fortran order, structured dtypes.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use npyz::{TypeChar, TypeStr, WriterBuilder};
use py_literal::Value;
use simpler_abi::DataType;

/// The 6 bytes every `.npy` file starts with.
pub const NPY_MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Deepest bracket nesting a header may use (a real one uses 2: the dict and the shape).
pub const MAX_HEADER_NESTING: usize = 16;

/// Longest header [`read`] accepts, in bytes (64 KiB; NumPy writes under 200, and its own
/// reader refuses more than 10 000 by default).
pub const MAX_HEADER_BYTES: usize = 1 << 16;

/// Largest data section [`read`] accepts, in bytes (4 GiB): a header declaring more is
/// refused before the data is read ([`NpyError::TooLarge`]); [`read_limited`] takes another
/// limit.
pub const MAX_DATA_BYTES: u64 = 1 << 32;

/// A dense array as read from or written to a `.npy` file.
#[derive(Clone, PartialEq, Eq)]
pub struct NpyArray {
    /// Extent of each dimension (empty for a 0-d array).
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: DataType,
    /// The elements, little-endian, C (row-major) order; `numel(shape) × dtype size` bytes.
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for NpyArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NpyArray")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .field("bytes_len", &self.bytes.len())
            .finish()
    }
}

impl NpyArray {
    /// An `f32` array of `shape` holding `values` (C order).
    ///
    /// # Panics
    /// If `values.len()` is not the product of `shape` (a caller bug).
    pub fn from_f32(shape: Vec<u64>, values: &[f32]) -> NpyArray {
        assert_eq!(
            numel(&shape),
            Some(values.len() as u64),
            "shape {shape:?} does not hold {} elements",
            values.len()
        );
        NpyArray {
            shape,
            dtype: DataType::Float32,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// The elements of an `f32` array; `None` for another dtype.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.dtype == DataType::Float32).then(|| {
            self.bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect()
        })
    }
}

/// Number of elements of `shape`: its product (1 for a 0-d array), `None` on overflow.
pub fn numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}
/// Why a `.npy` file could not be read or written. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// The file does not exist.
    #[error("`{}` does not exist", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The path is not a regular file (a directory, FIFO, socket or device); refused at
    /// open, without blocking on a FIFO.
    #[error("`{}` is {kind}, not a regular file", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is ([`simpler_host::fsio::ReadFileError::NotRegular`]'s `kind`).
        kind: &'static str,
    },
    /// The header declares more data than the reader's limit; nothing past the header was
    /// read.
    #[error(
        "`{}` declares {declared} bytes of data, more than the {limit} bytes a .npy input \
         may hold",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Bytes of data its header declares (shape × element size).
        declared: u64,
        /// The most bytes accepted ([`MAX_DATA_BYTES`] for [`read`]).
        limit: u64,
    },
    /// The header declares a shape whose size in bytes (elements × element size) does not
    /// fit in 64 bits: more than any limit; nothing past the header was read.
    #[error(
        "`{}` declares shape {shape:?} of {dtype}, whose size in bytes does not fit in 64 \
         bits{}",
        path.display(),
        limit.map_or(String::new(), |l| format!(" (a .npy input may hold at most {l} bytes)"))
    )]
    SizeOverflow {
        /// The file.
        path: PathBuf,
        /// The shape its header declares.
        shape: Vec<u64>,
        /// The element type.
        dtype: DataType,
        /// The most bytes the reader accepts ([`MAX_DATA_BYTES`] for [`read`]); `None` where
        /// there is no limit ([`parse`], [`write()`]).
        limit: Option<u64>,
    },
    /// Reading or writing failed.
    #[error("cannot {op} `{}`", path.display())]
    Io {
        /// "read" or "write".
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with the `.npy` magic.
    #[error("`{}` is not a .npy file (it does not start with \\x93NUMPY)", path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
    },
    /// The header is cut short, has an unknown version or does not parse.
    #[error("`{}` has a malformed .npy header: {reason}", path.display())]
    MalformedHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The element type has no simpler [`DataType`].
    #[error("`{}`: {reason}", path.display())]
    UnsupportedDtype {
        /// The file.
        path: PathBuf,
        /// The `descr` found.
        descr: String,
        /// Why, and what to do instead.
        reason: String,
    },
    /// The data is stored in Fortran (column-major) order.
    #[error(
        "`{}` is stored in Fortran order; only C order is supported \
         (save np.ascontiguousarray(arr) instead)",
        path.display()
    )]
    FortranOrder {
        /// The file.
        path: PathBuf,
    },
    /// The data is big-endian.
    #[error(
        "`{}` holds big-endian data (`{descr}`); only little-endian is supported \
         (save arr.astype(arr.dtype.newbyteorder('<')) instead)",
        path.display()
    )]
    BigEndian {
        /// The file.
        path: PathBuf,
        /// The `descr` found.
        descr: String,
    },
    /// The data section does not hold exactly shape × element size bytes.
    #[error(
        "`{}`: data length mismatch: shape {shape:?} of {dtype} needs {expected} bytes, got {got}",
        path.display()
    )]
    DataLength {
        /// The file.
        path: PathBuf,
        /// The shape.
        shape: Vec<u64>,
        /// The element type.
        dtype: DataType,
        /// Bytes the shape needs.
        expected: u64,
        /// Bytes present.
        got: u64,
    },
}

/// Refuses a header whose brackets nest deeper than [`MAX_HEADER_NESTING`] (the literal
/// parser recurses once per level).
fn check_nesting(text: &str) -> Result<(), String> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in text.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_HEADER_NESTING {
                    return Err(format!(
                        "brackets nest deeper than {MAX_HEADER_NESTING} levels"
                    ));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if depth > 0 || quote.is_some() {
        return Err("unexpected end of the header: a bracket or a string is not closed".into());
    }
    Ok(())
}

/// The literal parser's error in one line: `unexpected `<c>` at line:column (expected …)`.
fn literal_error(text: &str, error: &str) -> String {
    let at = error.split("-->").nth(1).and_then(|rest| {
        let pos = rest.split_whitespace().next()?;
        let (line, col) = pos.split_once(':')?;
        Some((line.parse::<usize>().ok()?, col.parse::<usize>().ok()?))
    });
    let expected = error
        .lines()
        .filter_map(|l| l.trim().strip_prefix("= "))
        .next_back()
        .map(|e| format!(" ({e})"))
        .unwrap_or_default();
    match at {
        Some((line, col)) => {
            let found = text
                .lines()
                .nth(line.saturating_sub(1))
                .and_then(|l| l.chars().nth(col.saturating_sub(1)));
            match found {
                Some(c) => format!("unexpected `{c}` at {line}:{col}{expected}"),
                None => format!("unexpected end of the header at {line}:{col}{expected}"),
            }
        }
        None => error.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

/// The header with the `L` suffix of Python 2 long integers (`(2L, 3L)`) dropped, as NumPy
/// drops it when reading such files.
fn drop_long_suffixes(text: &str) -> Cow<'_, str> {
    if !text.contains('L') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for c in text.chars() {
        match quote {
            Some(q) if c == q && prev != '\\' => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == 'L' && prev.is_ascii_digit() => {
                prev = c;
                continue;
            }
            None => {}
        }
        out.push(c);
        prev = c;
    }
    Cow::Owned(out)
}

/// NumPy `descr` for a [`DataType`] (bf16 is written as its raw bits, `<u2`).
pub fn descr_of(dtype: DataType) -> &'static str {
    match dtype {
        DataType::Float32 => "<f4",
        DataType::Float16 => "<f2",
        DataType::Int32 => "<i4",
        DataType::Int16 => "<i2",
        DataType::Int8 => "|i1",
        DataType::Uint8 => "|u1",
        DataType::Bfloat16 | DataType::Uint16 => "<u2",
        DataType::Int64 => "<i8",
        DataType::Uint64 => "<u8",
        DataType::Uint32 => "<u4",
        DataType::Float64 => "<f8",
    }
}

fn dtype_of(descr: &str, path: &Path) -> Result<DataType, NpyError> {
    let unsupported = |reason: String| NpyError::UnsupportedDtype {
        path: path.to_path_buf(),
        descr: descr.to_string(),
        reason,
    };
    if descr.starts_with('=') {
        return Err(unsupported(format!(
            "dtype `{descr}` has native byte order, which a file cannot pin down; \
             expected `<` (little-endian)"
        )));
    }
    let ty = TypeStr::from_str(descr).map_err(|_| {
        unsupported(format!(
            "dtype `{descr}` is not supported (expected a byte-order character first)"
        ))
    })?;
    let size = ty.size_field();
    if ty.endianness() == npyz::Endianness::Big && size != 1 {
        return Err(NpyError::BigEndian {
            path: path.to_path_buf(),
            descr: descr.to_string(),
        });
    }
    Ok(match (ty.type_char(), size) {
        (TypeChar::Float, 4) => DataType::Float32,
        (TypeChar::Float, 2) => DataType::Float16,
        (TypeChar::Int, 1) => DataType::Int8,
        (TypeChar::Int, 2) => DataType::Int16,
        (TypeChar::Int, 4) => DataType::Int32,
        (TypeChar::Int, 8) => DataType::Int64,
        (TypeChar::Uint, 1) => DataType::Uint8,
        (TypeChar::Uint, 2) => DataType::Uint16,
        (TypeChar::Uint, 4) => DataType::Uint32,
        (TypeChar::Uint, 8) => DataType::Uint64,
        (TypeChar::Float, 8) => DataType::Float64,
        (TypeChar::Bool, _) => {
            return Err(unsupported(
                "bool is not supported; convert to uint8 (arr.astype(np.uint8))".into(),
            ))
        }
        _ => {
            return Err(unsupported(format!(
            "dtype `{descr}` is not supported (supported: float32, float64, float16, int8, int16, \
                 int32, int64, uint8, uint16, uint32, uint64)"
        )))
        }
    })
}

/// Where the header starts, how long it says it is and whether it is UTF-8, after checking
/// magic and version in the first 12 (or fewer) bytes of `data`.
fn header_span(data: &[u8], path: &Path) -> Result<(usize, usize, bool), NpyError> {
    let malformed = |reason: String| NpyError::MalformedHeader {
        path: path.to_path_buf(),
        reason,
    };
    if data.len() < NPY_MAGIC.len() || &data[..NPY_MAGIC.len()] != NPY_MAGIC {
        return Err(NpyError::BadMagic {
            path: path.to_path_buf(),
        });
    }
    if data.len() < 8 {
        return Err(malformed("the file ends before the version bytes".into()));
    }
    let (major, minor) = (data[6], data[7]);
    let (len_bytes, utf8) = match major {
        1 => (2, false),
        2 => (4, false),
        3 => (4, true),
        _ => {
            return Err(malformed(format!(
                "unsupported format version {major}.{minor} (1.0, 2.0 and 3.0 are supported)"
            )))
        }
    };
    let start = 8 + len_bytes;
    if data.len() < start {
        return Err(malformed("the file ends inside the header length".into()));
    }
    let header_len = if len_bytes == 2 {
        u16::from_le_bytes([data[8], data[9]]) as usize
    } else {
        u32::from_le_bytes(data[8..12].try_into().expect("4 bytes")) as usize
    };
    Ok((start, header_len, utf8))
}

/// The header's text and where the data starts, after checking magic, version and length.
fn split_header<'a>(data: &'a [u8], path: &Path) -> Result<(Cow<'a, str>, usize), NpyError> {
    let malformed = |reason: String| NpyError::MalformedHeader {
        path: path.to_path_buf(),
        reason,
    };
    let (start, header_len, utf8) = header_span(data, path)?;
    let data_start = start
        .checked_add(header_len)
        .filter(|&e| e <= data.len())
        .ok_or_else(|| {
            malformed(format!(
                "the header claims {header_len} bytes but the file has only {}",
                data.len() - start
            ))
        })?;
    let raw = &data[start..data_start];
    let text = if utf8 {
        Cow::Borrowed(
            std::str::from_utf8(raw)
                .map_err(|e| malformed(format!("the header is not UTF-8: {e}")))?,
        )
    } else {
        // Latin-1: every byte is the code point of the same value.
        Cow::Owned(raw.iter().map(|&b| b as char).collect())
    };
    Ok((text, data_start))
}

/// What a header says: the shape, the element type, where the data starts and how many
/// bytes of it the shape needs (`None` when that overflows `u64`).
struct Header {
    shape: Vec<u64>,
    dtype: DataType,
    data_start: usize,
    expected: Option<u64>,
}

impl Header {
    /// The bytes of data the shape needs.
    ///
    /// # Errors
    /// [`NpyError::SizeOverflow`] (with `limit`) when that does not fit in `u64`.
    fn expected_bytes(&self, path: &Path, limit: Option<u64>) -> Result<u64, NpyError> {
        self.expected.ok_or_else(|| NpyError::SizeOverflow {
            path: path.to_path_buf(),
            shape: self.shape.clone(),
            dtype: self.dtype,
            limit,
        })
    }

    /// The [`NpyError::DataLength`] of a data section of `got` bytes where the shape needs
    /// `expected`.
    fn length_error(self, path: &Path, expected: u64, got: u64) -> NpyError {
        NpyError::DataLength {
            path: path.to_path_buf(),
            shape: self.shape,
            dtype: self.dtype,
            expected,
            got,
        }
    }
}

/// Parses the contents of a `.npy` file; `path` is only used in messages.
///
/// # Errors
/// [`NpyError`] naming `path`.
pub fn parse(data: &[u8], path: &Path) -> Result<NpyArray, NpyError> {
    let header = parse_header(data, path)?;
    let body = &data[header.data_start..];
    let expected = header.expected_bytes(path, None)?;
    if expected != body.len() as u64 {
        return Err(header.length_error(path, expected, body.len() as u64));
    }
    Ok(NpyArray {
        shape: header.shape,
        dtype: header.dtype,
        bytes: body.to_vec(),
    })
}

/// Parses the header at the start of `data` (which holds at least the whole header).
fn parse_header(data: &[u8], path: &Path) -> Result<Header, NpyError> {
    let malformed = |reason: String| NpyError::MalformedHeader {
        path: path.to_path_buf(),
        reason,
    };
    let (text, data_start) = split_header(data, path)?;
    check_nesting(&text).map_err(malformed)?;
    let text = drop_long_suffixes(text.trim_end());
    let lit = Value::from_str(&text).map_err(|e| {
        malformed(format!(
            "the header is not a Python literal: {}",
            literal_error(&text, &e.to_string())
        ))
    })?;
    let Value::Dict(items) = lit else {
        return Err(malformed("the header is not a dict".into()));
    };
    let mut descr = None;
    let mut fortran = None;
    let mut shape = None;
    for (k, v) in items {
        let Value::String(k) = k else {
            return Err(malformed("a header key is not a string".into()));
        };
        match k.as_str() {
            "descr" => descr = Some(v),
            "fortran_order" => fortran = Some(v),
            "shape" => shape = Some(v),
            other => return Err(malformed(format!("unexpected header key `{other}`"))),
        }
    }
    let descr = match descr {
        Some(Value::String(s)) => s,
        Some(Value::List(..)) => {
            return Err(NpyError::UnsupportedDtype {
                path: path.to_path_buf(),
                descr: "(structured)".into(),
                reason: "structured (record) dtypes are not supported".into(),
            })
        }
        Some(_) => return Err(malformed("`descr` is not a string".into())),
        None => return Err(malformed("the header has no `descr`".into())),
    };
    let fortran = match fortran {
        Some(Value::Boolean(b)) => b,
        Some(_) => return Err(malformed("`fortran_order` is not True or False".into())),
        None => return Err(malformed("the header has no `fortran_order`".into())),
    };
    let shape: Vec<u64> = match shape {
        Some(Value::Tuple(items)) => items
            .into_iter()
            .map(|d| match d {
                Value::Integer(n) => n
                    .to_string()
                    .parse::<u64>()
                    .map_err(|_| malformed(format!("`shape` holds {n}, not a dimension"))),
                _ => Err(malformed("`shape` holds a non-integer".into())),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(malformed("`shape` is not a tuple".into())),
        None => return Err(malformed("the header has no `shape`".into())),
    };
    let dtype = dtype_of(&descr, path)?;
    // Fortran and C order coincide when at most one dimension is longer than 1.
    if fortran && shape.iter().filter(|&&d| d > 1).count() > 1 {
        return Err(NpyError::FortranOrder {
            path: path.to_path_buf(),
        });
    }
    let expected = numel(&shape).and_then(|n| n.checked_mul(dtype.size_bytes() as u64));
    Ok(Header {
        shape,
        dtype,
        data_start,
        expected,
    })
}

/// Reads a `.npy` file, refusing one whose header declares more than [`MAX_DATA_BYTES`] of
/// data.
///
/// # Errors
/// As [`read_limited`].
pub fn read(path: &Path) -> Result<NpyArray, NpyError> {
    read_limited(path, MAX_DATA_BYTES)
}

/// Reads a `.npy` file whose data section may hold at most `limit` bytes.
///
/// The file must be a regular file (checked at open, without blocking on a FIFO:
/// [`simpler_host::fsio::open_regular`]). The header is read first (at most
/// [`MAX_HEADER_BYTES`]); the data section must then be exactly the shape × element size
/// bytes the header declares, compared with the file's size before any data is read, and
/// no more than that is read.
///
/// # Errors
/// [`NpyError`] naming the file: missing, not a regular file, unreadable, not a `.npy`,
/// malformed or over-long header, unsupported dtype or order, more data declared than
/// `limit` ([`NpyError::TooLarge`]; a shape whose byte count overflows `u64`:
/// [`NpyError::SizeOverflow`], naming the shape and `limit`), data length mismatch.
pub fn read_limited(path: &Path, limit: u64) -> Result<NpyArray, NpyError> {
    use simpler_host::fsio::{open_regular, ReadFileError};
    use std::io::Read;
    let io = |source| NpyError::Io {
        op: "read",
        path: path.to_path_buf(),
        source,
    };
    let (mut file, size) = open_regular(path).map_err(|e| match e {
        ReadFileError::Missing { path } => NpyError::Missing { path },
        ReadFileError::NotRegular { path, kind } => NpyError::NotRegular { path, kind },
        ReadFileError::Io { path, source } => NpyError::Io {
            op: "read",
            path,
            source,
        },
        ReadFileError::TooLarge {
            path, size, limit, ..
        } => NpyError::TooLarge {
            path,
            declared: size,
            limit,
        },
    })?;
    // Magic, version and header length, then the header they declare.
    let mut head = Vec::with_capacity(128);
    (&mut file).take(12).read_to_end(&mut head).map_err(io)?;
    let (start, header_len, _) = header_span(&head, path)?;
    if header_len > MAX_HEADER_BYTES {
        return Err(NpyError::MalformedHeader {
            path: path.to_path_buf(),
            reason: format!(
                "the header claims {header_len} bytes, more than the {MAX_HEADER_BYTES} \
                 accepted"
            ),
        });
    }
    let header_end = (start + header_len) as u64;
    (&mut file)
        .take(header_end.saturating_sub(head.len() as u64))
        .read_to_end(&mut head)
        .map_err(io)?;
    let header = parse_header(&head, path)?;
    // What the header declares, against the limit and the file's size, before reading it.
    let expected = header.expected_bytes(path, Some(limit))?;
    if expected > limit {
        return Err(NpyError::TooLarge {
            path: path.to_path_buf(),
            declared: expected,
            limit,
        });
    }
    let present = size.saturating_sub(header.data_start as u64);
    if expected != present {
        return Err(header.length_error(path, expected, present));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    file.take(expected).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 != expected {
        // The file shrank while being read.
        return Err(header.length_error(path, expected, bytes.len() as u64));
    }
    Ok(NpyArray {
        shape: header.shape,
        dtype: header.dtype,
        bytes,
    })
}

/// Serializes `n`-byte little-endian elements as `T` through npyz.
fn encode_as<T, const N: usize>(
    shape: &[u64],
    bytes: &[u8],
    from_le: impl Fn([u8; N]) -> T,
) -> Vec<u8>
where
    T: npyz::AutoSerialize,
{
    let mut out = Vec::with_capacity(128 + bytes.len());
    let mut w = npyz::WriteOptions::<T>::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut out)
        .begin_nd()
        .expect("writing a header to memory cannot fail");
    for chunk in bytes.chunks_exact(N) {
        w.push(&from_le(chunk.try_into().expect("N bytes")))
            .expect("writing to memory cannot fail");
    }
    w.finish().expect("the element count matches the shape");
    out
}

/// The bytes of a `.npy` file (format 1.0, or 2.0 when the header needs it) holding `array`.
///
/// # Panics
/// If `array.bytes` does not hold exactly shape × element size bytes ([`write()`] checks this
/// first and reports it as an error).
pub fn encode(array: &NpyArray) -> Vec<u8> {
    assert_eq!(
        numel(&array.shape).and_then(|n| n.checked_mul(array.dtype.size_bytes() as u64)),
        Some(array.bytes.len() as u64),
        "array bytes do not match its shape"
    );
    let (s, b) = (&array.shape[..], &array.bytes[..]);
    match array.dtype {
        DataType::Float32 => encode_as(s, b, f32::from_le_bytes),
        DataType::Float16 => encode_as(s, b, |c| half::f16::from_bits(u16::from_le_bytes(c))),
        DataType::Int8 => encode_as(s, b, i8::from_le_bytes),
        DataType::Int16 => encode_as(s, b, i16::from_le_bytes),
        DataType::Int32 => encode_as(s, b, i32::from_le_bytes),
        DataType::Int64 => encode_as(s, b, i64::from_le_bytes),
        DataType::Uint8 => encode_as(s, b, u8::from_le_bytes),
        DataType::Bfloat16 | DataType::Uint16 => encode_as(s, b, u16::from_le_bytes),
        DataType::Uint32 => encode_as(s, b, u32::from_le_bytes),
        DataType::Uint64 => encode_as(s, b, u64::from_le_bytes),
        DataType::Float64 => encode_as(s, b, f64::from_le_bytes),
    }
}

/// Writes `array` to `path` as a `.npy` file, atomically.
///
/// # Errors
/// [`NpyError::DataLength`] if the bytes do not match the shape, [`NpyError::SizeOverflow`]
/// if the shape's byte count overflows `u64` (nothing is written in either case), or
/// [`NpyError::Io`].
pub fn write(path: &Path, array: &NpyArray) -> Result<(), NpyError> {
    let expected = numel(&array.shape)
        .and_then(|n| n.checked_mul(array.dtype.size_bytes() as u64))
        .ok_or_else(|| NpyError::SizeOverflow {
            path: path.to_path_buf(),
            shape: array.shape.clone(),
            dtype: array.dtype,
            limit: None,
        })?;
    if expected != array.bytes.len() as u64 {
        return Err(NpyError::DataLength {
            path: path.to_path_buf(),
            shape: array.shape.clone(),
            dtype: array.dtype,
            expected,
            got: array.bytes.len() as u64,
        });
    }
    simpler_host::fsio::write_atomic(path, &encode(array)).map_err(|source| NpyError::Io {
        op: "write",
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests;
