//! JSON lines output with size-based rotation (`file`, `file.1` newest rotated, ...).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
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

/// One line of the file: a flat object, with the fields its kind has.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct JsonLine {
    pub ts_ns: u64,
    #[serde(rename = "type")]
    pub kind: Option<LineKind>,
    /// `peer`, `path`, `nic` or `comm`.
    pub scope: String,
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
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl JsonLine {
    fn keyed(ts_ns: u64, kind: LineKind, key: Key) -> Self {
        JsonLine {
            ts_ns,
            kind: Some(kind),
            scope: key.scope().to_owned(),
            id: key.id(),
            ..JsonLine::default()
        }
    }

    /// The line's operation, peer, path and NIC: those of the work an event blames.
    fn blaming(self, c: &Culprit) -> Self {
        JsonLine {
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
        JsonLine {
            tput_bps: Some(a.tput_bps),
            baseline_bps: Some(a.baseline_bps),
            ..JsonLine::keyed(a.ts_ns, kind, a.key)
        }
        .blaming(&a.culprit)
    }

    fn sample(s: &Sample) -> Self {
        JsonLine {
            tput_bps: Some(s.tput_bps),
            baseline_bps: Some(s.baseline_bps),
            bytes: Some(s.bytes),
            completions: Some(s.completions),
            comm: Some(s.coll.comm),
            op: Some(s.coll.op),
            seq: Some(s.coll.seq),
            ..JsonLine::keyed(s.ts_ns, LineKind::Sample, s.key)
        }
    }

    fn stall(s: &Stall) -> Self {
        JsonLine {
            idle_ns: Some(s.idle_ns),
            outstanding: Some(s.outstanding),
            ..JsonLine::keyed(s.ts_ns, LineKind::Stall, s.key)
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
        JsonLine {
            ts_ns: t.ts_ns,
            kind: Some(LineKind::Transition),
            scope: scope.to_owned(),
            id,
            from: Some(t.from.to_owned()),
            to: Some(t.to.to_owned()),
            reason: Some(t.reason.to_owned()),
            ..JsonLine::default()
        }
    }
}

/// Writes lines to `path`, moving it to `path.1` (and older ones up) once it would pass
/// `max_bytes`, keeping `keep` rotated files.
#[derive(Debug)]
pub struct JsonWriter {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    out: BufWriter<File>,
    written: u64,
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
            out: BufWriter::new(file),
            written,
            buf: Vec::with_capacity(512),
        })
    }

    /// Appends one line, rotating first if it would not fit.
    pub fn write(&mut self, line: &JsonLine) -> Result<(), Error> {
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, line)?;
        self.buf.push(b'\n');
        let len = self.buf.len() as u64;
        if self.written > 0 && self.written + len > self.max_bytes {
            self.rotate()?;
        }
        self.out
            .write_all(&self.buf)
            .map_err(|e| Error::io(&self.path, e))?;
        self.written += len;
        Ok(())
    }

    /// Pushes buffered lines to the file.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.out.flush().map_err(|e| Error::io(&self.path, e))
    }

    fn rotate(&mut self) -> Result<(), Error> {
        self.flush()?;
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
        self.out = BufWriter::new(open_append(&self.path)?);
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
