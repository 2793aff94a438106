//! JSON lines output with size-based rotation (`file`, `file.1` newest rotated, ...).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::event::{Op, Scope, Transition};
use crate::window::{Alert, Culprit, Event, Key, Sample, Stall};
use crate::Error;

/// What a line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    Sample,
    Anomaly,
    Recovered,
    Stall,
    Transition,
}

/// One line of the file: a flat object, with the fields its kind has. Its text fields are
/// `S`: owned when read back ([`JsonLine`]), borrowed from the event when the collector writes
/// one ([`JsonWriter::write_event`]), so writing a line allocates nothing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Line<S> {
    pub ts_ns: u64,
    #[serde(rename = "type")]
    pub kind: Option<LineKind>,
    /// `peer`, `path`, `nic` or `comm`.
    pub scope: S,
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tput_bps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_bps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outstanding: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<Op>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<S>,
}

/// A line as read back.
pub type JsonLine = Line<String>;

impl LineKind {
    /// Its name in the file (serde's, without the quotes).
    fn wire_name(self) -> &'static str {
        match self {
            LineKind::Sample => "sample",
            LineKind::Anomaly => "anomaly",
            LineKind::Recovered => "recovered",
            LineKind::Stall => "stall",
            LineKind::Transition => "transition",
        }
    }
}

/// Appends `v` in decimal.
fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends `s` as a JSON string: as is between quotes when nothing in it needs escaping (the
/// monitor's own names), through serde otherwise.
fn push_str(out: &mut Vec<u8>, s: &str) -> Result<(), Error> {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(&mut *out, s).map_err(Error::from)
    }
}

/// Appends `,"name":` (names are the monitor's own: nothing to escape).
fn push_key(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

impl<S: AsRef<str>> Line<S> {
    /// Appends the line as serde writes it (the same fields, in the same order, skipped
    /// alike), without serde's per-field machinery: the collector writes thousands a second.
    fn write_to(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(b"{\"ts_ns\":");
        push_u64(out, self.ts_ns);
        push_key(out, "type");
        match self.kind {
            Some(k) => push_str(out, k.wire_name())?,
            None => out.extend_from_slice(b"null"),
        }
        push_key(out, "scope");
        push_str(out, self.scope.as_ref())?;
        push_key(out, "id");
        push_u64(out, self.id);
        for (name, v) in [
            ("tput_bps", self.tput_bps),
            ("baseline_bps", self.baseline_bps),
        ] {
            if let Some(v) = v {
                push_key(out, name);
                // serde_json's own float text (and `null` for what JSON cannot hold).
                serde_json::to_writer(&mut *out, &v)?;
            }
        }
        let counts = [
            ("bytes", self.bytes),
            ("completions", self.completions),
            ("idle_ns", self.idle_ns),
            ("outstanding", self.outstanding),
            ("comm", self.comm),
        ];
        for (name, v) in counts {
            if let Some(v) = v {
                push_key(out, name);
                push_u64(out, v);
            }
        }
        if let Some(op) = self.op {
            push_key(out, "op");
            push_str(out, op.wire_name())?;
        }
        let ids = [
            ("seq", self.seq),
            ("peer", self.peer.map(u64::from)),
            ("path", self.path.map(u64::from)),
            ("nic", self.nic.map(u64::from)),
        ];
        for (name, v) in ids {
            if let Some(v) = v {
                push_key(out, name);
                push_u64(out, v);
            }
        }
        for (name, v) in [
            ("from", &self.from),
            ("to", &self.to),
            ("reason", &self.reason),
        ] {
            if let Some(v) = v {
                push_key(out, name);
                push_str(out, v.as_ref())?;
            }
        }
        out.push(b'}');
        Ok(())
    }
}

impl<S: From<&'static str> + Default> Line<S> {
    fn keyed(ts_ns: u64, kind: LineKind, key: Key) -> Self {
        Line {
            ts_ns,
            kind: Some(kind),
            scope: key.scope().into(),
            id: key.id(),
            ..Line::default()
        }
    }

    /// The line's operation, peer, path and NIC: those of the work an event blames.
    fn blaming(self, c: &Culprit) -> Self {
        Line {
            comm: Some(c.coll.comm),
            op: Some(c.coll.op),
            seq: Some(c.coll.seq),
            peer: Some(c.peer),
            path: Some(c.path),
            nic: Some(c.nic),
            ..self
        }
    }

    fn alert(kind: LineKind, a: &Alert) -> Self {
        Line {
            tput_bps: Some(a.tput_bps),
            baseline_bps: Some(a.baseline_bps),
            ..Line::keyed(a.ts_ns, kind, a.key)
        }
        .blaming(&a.culprit)
    }

    fn sample(s: &Sample) -> Self {
        Line {
            tput_bps: Some(s.tput_bps),
            baseline_bps: Some(s.baseline_bps),
            bytes: Some(s.bytes),
            completions: Some(s.completions),
            comm: Some(s.coll.comm),
            op: Some(s.coll.op),
            seq: Some(s.coll.seq),
            ..Line::keyed(s.ts_ns, LineKind::Sample, s.key)
        }
    }

    fn stall(s: &Stall) -> Self {
        Line {
            idle_ns: Some(s.idle_ns),
            outstanding: Some(s.outstanding),
            ..Line::keyed(s.ts_ns, LineKind::Stall, s.key)
        }
        .blaming(&s.culprit)
    }

    /// The line for an analysis event.
    pub fn from_event(e: &Event) -> Self {
        match e {
            Event::Sample(s) => Self::sample(s),
            Event::Anomaly(a) => Self::alert(LineKind::Anomaly, a),
            Event::Recovered(a) => Self::alert(LineKind::Recovered, a),
            Event::Stall(s) => Self::stall(s),
        }
    }

    /// The line for a transition.
    pub fn from_transition(t: &Transition) -> Self {
        let (scope, id) = match t.scope {
            Scope::Peer(p) => ("peer", u64::from(p)),
            Scope::Path(p) => ("path", u64::from(p)),
            Scope::Nic(n) => ("nic", u64::from(n)),
            Scope::Comm(c) => ("comm", c),
        };
        Line {
            ts_ns: t.ts_ns,
            kind: Some(LineKind::Transition),
            scope: scope.into(),
            id,
            from: Some(t.from.into()),
            to: Some(t.to.into()),
            reason: Some(t.reason.into()),
            ..Line::default()
        }
    }
}

/// Bytes gathered before they go to the file in one `write`. Large writes cost the kernel
/// less per byte than `BufWriter`'s 8 KiB ones, which each ended in a partly written page the
/// next one had to look up again.
const WRITE_CHUNK: usize = 64 << 10;

/// Writes lines to `path`, moving it to `path.1` (and older ones up) once it would pass
/// `max_bytes`, keeping `keep` rotated files.
#[derive(Debug)]
pub struct JsonWriter {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    file: File,
    /// Bytes of whole lines in the file and in `buf`.
    written: u64,
    /// Lines not yet in the file.
    buf: Vec<u8>,
}

fn open_append(path: &Path) -> Result<File, Error> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, e))
}

fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

impl JsonWriter {
    /// Appends to `path` (creating it).
    pub fn create(path: &Path, max_bytes: u64, keep: usize) -> Result<Self, Error> {
        let file = open_append(path)?;
        let written = file.metadata().map_err(|e| Error::io(path, e))?.len();
        Ok(JsonWriter {
            path: path.to_owned(),
            max_bytes,
            keep,
            file,
            written,
            buf: Vec::with_capacity(WRITE_CHUNK + 1024),
        })
    }

    /// Appends one line, rotating first if it would not fit.
    pub fn write(&mut self, line: &JsonLine) -> Result<(), Error> {
        self.write_line(line)
    }

    /// Appends the line of an analysis event; allocates nothing.
    pub fn write_event(&mut self, e: &Event) -> Result<(), Error> {
        self.write_line(&Line::<&str>::from_event(e))
    }

    /// Appends the line of a transition; allocates nothing.
    pub fn write_transition(&mut self, t: &Transition) -> Result<(), Error> {
        self.write_line(&Line::<&str>::from_transition(t))
    }

    fn write_line<S: AsRef<str>>(&mut self, line: &Line<S>) -> Result<(), Error> {
        let start = self.buf.len();
        if let Err(e) = line.write_to(&mut self.buf) {
            self.buf.truncate(start);
            return Err(e);
        }
        self.buf.push(b'\n');
        let len = (self.buf.len() - start) as u64;
        if self.written > 0 && self.written + len > self.max_bytes {
            // The lines before this one end the current file; this one starts the next.
            self.put(start)?;
            self.rotate()?;
        }
        self.written += len;
        if self.buf.len() >= WRITE_CHUNK {
            self.put(self.buf.len())?;
        }
        Ok(())
    }

    /// Writes the first `n` buffered bytes to the file and drops them from the buffer.
    fn put(&mut self, n: usize) -> Result<(), Error> {
        if n > 0 {
            self.file
                .write_all(&self.buf[..n])
                .map_err(|e| Error::io(&self.path, e))?;
            self.buf.drain(..n);
        }
        Ok(())
    }

    /// Pushes buffered lines to the file.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.put(self.buf.len())
    }

    /// Whether lines wait in the buffer.
    pub fn is_pending(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Moves the file aside (everything before this is in it) and starts an empty one.
    fn rotate(&mut self) -> Result<(), Error> {
        if self.keep == 0 {
            std::fs::remove_file(&self.path).map_err(|e| Error::io(&self.path, e))?;
        } else {
            for n in (1..self.keep).rev() {
                let from = rotated(&self.path, n);
                if from.exists() {
                    let to = rotated(&self.path, n + 1);
                    std::fs::rename(&from, &to).map_err(|e| Error::io(&from, e))?;
                }
            }
            let to = rotated(&self.path, 1);
            std::fs::rename(&self.path, &to).map_err(|e| Error::io(&self.path, e))?;
        }
        self.file = open_append(&self.path)?;
        self.written = 0;
        Ok(())
    }
}

/// Reads every line of a file written by [`JsonWriter`].
pub fn read_lines(path: &Path) -> Result<Vec<JsonLine>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(Error::from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::CollId;
    use crate::window::Culprit;
    use proptest::prelude::*;

    fn transition(ts_ns: u64) -> Transition {
        Transition {
            ts_ns,
            scope: Scope::Nic(3),
            from: "healthy",
            to: "failed-over",
            reason: "link down",
        }
    }

    #[test]
    fn lines_are_flat_objects_with_ts_ns() {
        let t = serde_json::to_string(&JsonLine::from_transition(&transition(7))).unwrap();
        assert_eq!(
            t,
            r#"{"ts_ns":7,"type":"transition","scope":"nic","id":3,"from":"healthy","to":"failed-over","reason":"link down"}"#
        );
        let a = Alert {
            ts_ns: 9,
            key: Key::Path(1),
            tput_bps: 2.5,
            baseline_bps: 10.0,
            culprit: Culprit {
                coll: CollId {
                    comm: 5,
                    op: Op::AllReduce,
                    seq: 4,
                },
                peer: 2,
                path: 1,
                nic: 0,
            },
        };
        let a = serde_json::to_string(&JsonLine::from_event(&Event::Anomaly(a))).unwrap();
        assert_eq!(
            a,
            r#"{"ts_ns":9,"type":"anomaly","scope":"path","id":1,"tput_bps":2.5,"baseline_bps":10.0,"comm":5,"op":"all_reduce","seq":4,"peer":2,"path":1,"nic":0}"#
        );
    }

    fn opt<T: std::fmt::Debug + Clone>(
        s: impl Strategy<Value = T>,
    ) -> impl Strategy<Value = Option<T>> {
        proptest::option::of(s)
    }

    fn kinds() -> impl Strategy<Value = Option<LineKind>> {
        opt(proptest::sample::select(vec![
            LineKind::Sample,
            LineKind::Anomaly,
            LineKind::Recovered,
            LineKind::Stall,
            LineKind::Transition,
        ]))
    }

    fn ops() -> impl Strategy<Value = Option<Op>> {
        opt(proptest::sample::select(vec![
            Op::AllReduce,
            Op::AllToAll,
            Op::ReduceScatter,
            Op::Send,
            Op::Other,
        ]))
    }

    fn floats() -> impl Strategy<Value = Option<f64>> {
        opt(prop_oneof![
            any::<f64>(),
            0.0..1e12f64,
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(0.0)
        ])
    }

    prop_compose! {
        fn lines()(
            (ts_ns, kind, scope, id) in (any::<u64>(), kinds(), "[a-z]{0,5}|\\PC{0,6}", any::<u64>()),
            (tput_bps, baseline_bps) in (floats(), floats()),
            (bytes, completions, idle_ns, outstanding, comm) in
                (opt(any::<u64>()), opt(any::<u64>()), opt(any::<u64>()), opt(any::<u64>()), opt(any::<u64>())),
            (op, seq, peer, path, nic) in
                (ops(), opt(any::<u64>()), opt(any::<u32>()), opt(any::<u16>()), opt(any::<u16>())),
            (from, to, reason) in
                (opt("[a-z-]{0,8}"), opt("\\PC{0,8}"), opt("[ -~\\n\\t\\u{1}]{0,12}")),
        ) -> JsonLine {
            Line {
                ts_ns, kind, scope, id, tput_bps, baseline_bps, bytes, completions, idle_ns,
                outstanding, comm, op, seq, peer, path, nic, from, to, reason,
            }
        }
    }

    proptest! {
        /// The collector's own writer puts out the bytes serde does, for any line.
        #[test]
        fn hand_written_lines_are_serde_lines(line in lines()) {
            let mut mine = Vec::new();
            line.write_to(&mut mine).unwrap();
            prop_assert_eq!(String::from_utf8(mine).unwrap(), serde_json::to_string(&line).unwrap());
        }
    }

    #[test]
    fn events_write_as_their_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.jsonl");
        let culprit = Culprit {
            coll: CollId {
                comm: u64::MAX,
                op: Op::ReduceScatter,
                seq: 0,
            },
            peer: 7,
            path: 3,
            nic: 1,
        };
        let events = [
            Event::Anomaly(Alert {
                ts_ns: 5,
                key: Key::Nic(1),
                tput_bps: 1.0e9 / 3.0,
                baseline_bps: 2.0e9,
                culprit,
            }),
            Event::Stall(Stall {
                ts_ns: 6,
                key: Key::Peer(7),
                idle_ns: 100,
                outstanding: 4,
                culprit,
            }),
        ];
        let mut w = JsonWriter::create(&path, 1 << 20, 1).unwrap();
        for e in &events {
            w.write_event(e).unwrap();
        }
        w.write_transition(&transition(8)).unwrap();
        w.flush().unwrap();
        let mut want: Vec<JsonLine> = events.iter().map(JsonLine::from_event).collect();
        want.push(JsonLine::from_transition(&transition(8)));
        assert_eq!(read_lines(&path).unwrap(), want);
    }

    #[test]
    fn rotates_by_size_keeping_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mon.jsonl");
        let one = serde_json::to_string(&JsonLine::from_transition(&transition(100))).unwrap();
        let line_len = one.len() as u64 + 1;
        // Two lines per file, two rotated files kept.
        let mut w = JsonWriter::create(&path, line_len * 2, 2).unwrap();
        for ts in 100..107 {
            w.write(&JsonLine::from_transition(&transition(ts)))
                .unwrap();
        }
        w.flush().unwrap();
        let ts =
            |p: &Path| -> Vec<u64> { read_lines(p).unwrap().iter().map(|l| l.ts_ns).collect() };
        assert_eq!(ts(&path), [106]);
        assert_eq!(ts(&rotated(&path, 1)), [104, 105]);
        assert_eq!(ts(&rotated(&path, 2)), [102, 103]);
        assert!(!rotated(&path, 3).exists());
    }

    #[test]
    fn lines_read_back_equal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        let line = JsonLine::from_transition(&transition(1));
        let mut w = JsonWriter::create(&path, 1 << 20, 1).unwrap();
        w.write(&line).unwrap();
        w.flush().unwrap();
        assert_eq!(read_lines(&path).unwrap(), [line]);
    }
}
