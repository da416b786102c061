//! Bodies on the wire: the protobuf `LogGroup` PutLogs sends and the `LogGroupList` PullLogs
//! answers (LogHub's `logs.proto`, the one the SDK's protobuf crate ships), and the two
//! compressions, lz4 (block format, no size prefix: what the SDK sends and reads) and deflate
//! (zlib: RFC 1950 framing, what LogHub's other SDKs call "deflate").

use std::io::{Read, Write};

use prost::Message;

use crate::error::ApiError;

/// `Log.Content` and `LogTag`: a key and a value.
#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    /// `key`.
    #[prost(string, required, tag = "1")]
    pub key: String,
    /// `value`.
    #[prost(string, required, tag = "2")]
    pub value: String,
}

/// `Log`: one log entry.
#[derive(Clone, PartialEq, Message)]
pub struct Log {
    /// `time`, in seconds since the epoch.
    #[prost(uint32, required, tag = "1")]
    pub time: u32,
    /// `contents`.
    #[prost(message, repeated, tag = "2")]
    pub contents: Vec<KeyValue>,
    /// `time_ns`, the nanoseconds of `time`.
    #[prost(fixed32, optional, tag = "4")]
    pub time_ns: Option<u32>,
}

/// `LogGroup`: what one PutLogs writes, and what PullLogs hands back one by one.
#[derive(Clone, PartialEq, Message)]
pub struct LogGroup {
    /// `logs`.
    #[prost(message, repeated, tag = "1")]
    pub logs: Vec<Log>,
    /// `topic`.
    #[prost(string, optional, tag = "3")]
    pub topic: Option<String>,
    /// `source`.
    #[prost(string, optional, tag = "4")]
    pub source: Option<String>,
    /// `log_tags`.
    #[prost(message, repeated, tag = "6")]
    pub log_tags: Vec<KeyValue>,
}

/// `LogGroupList` with its groups kept as the bytes they were written in: a repeated `bytes`
/// field has the wire format of a repeated message, so the groups go back byte for byte.
#[derive(Clone, PartialEq, Message)]
struct RawLogGroupList {
    #[prost(bytes = "vec", repeated, tag = "1")]
    log_groups: Vec<Vec<u8>>,
}

/// The `LogGroupList` of these encoded groups.
pub fn encode_group_list(groups: &[&[u8]]) -> Vec<u8> {
    RawLogGroupList {
        log_groups: groups.iter().map(|g| g.to_vec()).collect(),
    }
    .encode_to_vec()
}

/// The groups of an encoded `LogGroupList`, decoded (for tests and tools).
pub fn decode_group_list(bytes: &[u8]) -> Result<Vec<LogGroup>, prost::DecodeError> {
    RawLogGroupList::decode(bytes)?
        .log_groups
        .iter()
        .map(|g| LogGroup::decode(g.as_slice()))
        .collect()
}

/// A compression LogHub names in `x-log-compresstype` and `Accept-Encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// `lz4`: the lz4 block format without a size prefix (the size is `x-log-bodyrawsize`).
    Lz4,
    /// `deflate`: zlib (RFC 1950).
    Deflate,
}

impl Compression {
    /// The name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Lz4 => "lz4",
            Compression::Deflate => "deflate",
        }
    }

    /// The compression of this name, `None` for one the emulator does not speak.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "lz4" => Some(Compression::Lz4),
            "deflate" => Some(Compression::Deflate),
            _ => None,
        }
    }

    /// The first compression of an `Accept-Encoding` list the emulator speaks, `None` for an
    /// empty list (`""`) or one of only others: the answer is then not compressed.
    pub fn from_accept_encoding(value: &str) -> Option<Self> {
        value
            .split(',')
            .map(|token| {
                token
                    .split(';')
                    .next()
                    .unwrap_or("")
                    .trim_matches([' ', '"'])
            })
            .find_map(Compression::from_name)
    }

    /// `data` compressed.
    pub fn compress(self, data: &[u8]) -> Vec<u8> {
        match self {
            Compression::Lz4 => lz4::block::compress(data, None, false)
                .expect("lz4 compresses any buffer below 2 GiB"),
            Compression::Deflate => {
                let mut encoder =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                encoder
                    .write_all(data)
                    .and_then(|()| encoder.finish())
                    .expect("writing to a Vec does not fail")
            }
        }
    }

    /// `data` decompressed to exactly `raw_size` bytes, or the reason it is not.
    pub fn decompress(self, data: &[u8], raw_size: usize) -> Result<Vec<u8>, String> {
        let out = match self {
            Compression::Lz4 => {
                let size = i32::try_from(raw_size).map_err(|_| "raw size too large".to_string())?;
                lz4::block::decompress(data, Some(size)).map_err(|e| e.to_string())?
            }
            Compression::Deflate => {
                let mut out = Vec::with_capacity(raw_size);
                flate2::read::ZlibDecoder::new(data)
                    .take(raw_size as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| e.to_string())?;
                out
            }
        };
        if out.len() != raw_size {
            return Err(format!(
                "decompressed to {} bytes, x-log-bodyrawsize says {raw_size}",
                out.len()
            ));
        }
        Ok(out)
    }
}

/// The body of a PutLogs: decompressed per `x-log-compresstype`, its size checked against
/// `x-log-bodyrawsize`, and decoded as a `LogGroup` (returned with the raw protobuf bytes).
pub fn decode_put_body(
    body: &[u8],
    compress_type: Option<&str>,
    raw_size: Option<&str>,
) -> Result<(Vec<u8>, LogGroup), ApiError> {
    let raw_size = match raw_size {
        None => None,
        Some(text) => Some(text.trim().parse::<usize>().map_err(|_| {
            ApiError::new(400, "InvalidBodyRawSize", "x-log-bodyrawsize is invalid.")
        })?),
    };
    let raw = match compress_type.filter(|t| !t.is_empty()) {
        None => {
            if raw_size.is_some_and(|size| size != body.len()) {
                return Err(ApiError::new(
                    400,
                    "InvalidBodyRawSize",
                    "x-log-bodyrawsize is invalid.",
                ));
            }
            body.to_vec()
        }
        Some(name) => {
            let compression = Compression::from_name(name).ok_or_else(|| {
                ApiError::new(
                    400,
                    "InvalidCompressType",
                    format!("x-log-compresstype {name} is unsupported."),
                )
            })?;
            let size = raw_size.ok_or_else(|| {
                ApiError::new(
                    400,
                    "MissingBodyRawSize",
                    "x-log-bodyrawsize does not exist in header when it is necessary.",
                )
            })?;
            compression.decompress(body, size).map_err(|_| {
                ApiError::new(400, "InvalidBodyRawSize", "x-log-bodyrawsize is invalid.")
            })?
        }
    };
    // The reference calls a body it cannot read PostBodyInvalid.
    let group = LogGroup::decode(raw.as_slice()).map_err(|e| {
        ApiError::new(
            400,
            "PostBodyInvalid",
            format!("the body is not a LogGroup: {e}"),
        )
    })?;
    Ok((raw, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(n: u32) -> LogGroup {
        LogGroup {
            logs: vec![Log {
                time: n,
                contents: vec![KeyValue {
                    key: "k".into(),
                    value: format!("v{n}"),
                }],
                time_ns: Some(7),
            }],
            topic: Some("t".into()),
            source: None,
            log_tags: vec![],
        }
    }

    #[test]
    fn both_compressions_round_trip_and_check_the_size() {
        let data = b"hello hello hello hello".repeat(10);
        for c in [Compression::Lz4, Compression::Deflate] {
            let packed = c.compress(&data);
            assert_eq!(c.decompress(&packed, data.len()).unwrap(), data);
            assert!(c.decompress(&packed, data.len() - 1).is_err(), "{c:?}");
        }
    }

    #[test]
    fn accept_encoding_picks_the_first_known() {
        assert_eq!(
            Compression::from_accept_encoding("lz4"),
            Some(Compression::Lz4)
        );
        assert_eq!(
            Compression::from_accept_encoding("gzip, deflate"),
            Some(Compression::Deflate)
        );
        assert_eq!(Compression::from_accept_encoding("\"\""), None);
        assert_eq!(Compression::from_accept_encoding("gzip"), None);
    }

    #[test]
    fn a_group_list_carries_the_groups_byte_for_byte() {
        let a = group(1).encode_to_vec();
        let b = group(2).encode_to_vec();
        let list = encode_group_list(&[&a, &b]);
        assert_eq!(decode_group_list(&list).unwrap(), vec![group(1), group(2)]);
        assert!(decode_group_list(&encode_group_list(&[]))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn put_bodies_are_checked() {
        let raw = group(3).encode_to_vec();
        let packed = Compression::Lz4.compress(&raw);
        let size = raw.len().to_string();
        let (bytes, decoded) = decode_put_body(&packed, Some("lz4"), Some(&size)).unwrap();
        assert_eq!((bytes, decoded), (raw.clone(), group(3)));
        let code = |r: Result<_, ApiError>| r.unwrap_err().code;
        assert_eq!(
            code(decode_put_body(&packed, Some("lz4"), None)),
            "MissingBodyRawSize"
        );
        assert_eq!(
            code(decode_put_body(&packed, Some("zstd"), Some(&size))),
            "InvalidCompressType"
        );
        assert_eq!(
            code(decode_put_body(&packed, Some("lz4"), Some("1"))),
            "InvalidBodyRawSize"
        );
        assert_eq!(
            code(decode_put_body(&raw, None, Some("1"))),
            "InvalidBodyRawSize"
        );
        assert_eq!(
            code(decode_put_body(b"\xff\xff", None, None)),
            "PostBodyInvalid"
        );
    }
}
