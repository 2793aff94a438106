//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in topology discovery, XML handling and search.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// The XML text is not well-formed.
    #[error("{source_name}:{line}:{col}: malformed XML: {msg}")]
    XmlSyntax {
        /// File name, or `<string>`.
        source_name: String,
        /// 1-based line.
        line: u32,
        /// 1-based column.
        col: u32,
        /// What the parser said.
        msg: String,
    },
    /// The XML is well-formed but does not describe a valid system.
    #[error("{source_name}:{line}: {msg}")]
    XmlContent {
        /// File name, or `<string>`.
        source_name: String,
        /// 1-based line of the offending element.
        line: u32,
        /// What is wrong.
        msg: String,
    },
    /// A PCI bus id that does not parse.
    #[error("bad PCI bus id {0:?} (expected dddd:bb:dd.f)")]
    BadBusId(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An environment knob has a value we cannot use.
    #[error("{var}={value:?}: {msg}")]
    Config {
        /// The variable name.
        var: String,
        /// Its value.
        value: String,
        /// Why it is rejected.
        msg: String,
    },
    /// The set of ranks does not fit the systems given.
    #[error("rank {rank}: {msg}")]
    Rank {
        /// The rank.
        rank: usize,
        /// What is wrong.
        msg: String,
    },
    /// No network device is usable where ranks on different hosts must talk.
    #[error("host {host:#x}: no usable network device ({why})")]
    NoNetwork {
        /// The host id.
        host: u64,
        /// The filters that removed them all.
        why: String,
    },
    /// Invalid input to the search (empty communicator, ...).
    #[error("search: {0}")]
    Search(String),
}

/// Shorthand.
pub type Result<T> = std::result::Result<T, TopoError>;
