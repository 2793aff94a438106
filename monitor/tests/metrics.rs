//! The Prometheus endpoint scraped over real TCP, its body checked against the text
//! exposition format's rules (version 0.0.4) by a strict validator written here, so every
//! rule checked is spelled out below and a lenient parser cannot let a bad line through.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use ccl_monitor::{
    CollId, Engine, Monitor, MonitorConfig, Op, Publisher, Scope, Transition, Unit, Work,
};

fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut c = s.chars();
    let ok_first = |ch: char| ch.is_ascii_alphabetic() || ch == '_' || (colon && ch == ':');
    let ok_rest = |ch: char| ok_first(ch) || ch.is_ascii_digit();
    c.next().is_some_and(ok_first) && c.all(ok_rest)
}

fn is_value(s: &str) -> bool {
    matches!(s, "NaN" | "+Inf" | "-Inf") || s.parse::<f64>().is_ok_and(f64::is_finite)
}

/// Parses `{a="x",b="y"}` strictly (escapes `\\`, `\"`, `\n`); returns the label pairs.
fn labels(s: &str) -> Result<Vec<(String, String)>, String> {
    let inner = s
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .ok_or(format!("labels not braced: {s}"))?;
    let mut out = Vec::new();
    let mut rest = inner;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").ok_or(format!("no =\" in {rest}"))?;
        if !is_name(name, false) || name.starts_with("__") {
            return Err(format!("bad label name {name:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                    c @ ('\\' | '"') => value.push(c),
                    'n' => value.push('\n'),
                    c => return Err(format!("bad escape \\{c}")),
                },
                (_, '\n') => return Err("newline in label value".into()),
                (_, c) => value.push(c),
            }
        };
        out.push((name.to_owned(), value));
        rest = &after[end + 1..];
        rest = match rest.strip_prefix(',') {
            Some(r) if !r.is_empty() => r,
            Some(_) => "",
            None if rest.is_empty() => rest,
            None => return Err(format!("junk after label value: {rest}")),
        };
    }
    Ok(out)
}

/// Every rule of the text format the body could break; returns samples by (name, labels).
fn validate(body: &str) -> HashMap<(String, Vec<(String, String)>), f64> {
    assert!(body.ends_with('\n'), "the last line ends with a newline");
    let (mut typed, mut helped, mut done) = (HashMap::new(), HashSet::new(), HashSet::new());
    let mut current: Option<String> = None;
    let mut samples = HashMap::new();
    for line in body.lines().filter(|l| !l.is_empty()) {
        if let Some(c) = line.strip_prefix("# ") {
            let mut p = c.splitn(3, ' ');
            let (kw, name, rest) = (p.next().unwrap(), p.next().unwrap(), p.next());
            assert!(is_name(name, true), "bad metric name {name:?}");
            match kw {
                "HELP" => assert!(helped.insert(name.to_owned()), "second HELP for {name}"),
                "TYPE" => {
                    let t = rest.unwrap();
                    assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&t));
                    assert!(
                        !samples.keys().any(|(n, _)| n == name),
                        "TYPE after samples of {name}"
                    );
                    assert!(
                        typed.insert(name.to_owned(), t.to_owned()).is_none(),
                        "second TYPE"
                    );
                }
                _ => {}
            }
            continue;
        }
        assert!(!line.starts_with('#'), "comment lines need '# ': {line}");
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(is_value(value), "bad value {value:?} in {line}");
        let (name, labels) = match series.find('{') {
            Some(i) => (&series[..i], labels(&series[i..]).unwrap()),
            None => (series, Vec::new()),
        };
        assert!(is_name(name, true), "bad metric name {name:?}");
        assert!(typed.contains_key(name), "{name} has no TYPE");
        if current.as_deref() != Some(name) {
            assert!(
                done.insert(name.to_owned()),
                "samples of {name} not grouped together"
            );
            current = Some(name.to_owned());
        }
        let v = value.parse().unwrap_or(f64::NAN);
        assert!(
            samples.insert((name.to_owned(), labels), v).is_none(),
            "duplicate series {line}"
        );
    }
    samples
}

fn key(name: &str, scope: &str, id: &str) -> (String, Vec<(String, String)>) {
    let l = vec![("scope".into(), scope.into()), ("id".into(), id.into())];
    (name.to_owned(), l)
}

#[test]
fn validator_rejects_what_the_format_forbids() {
    let bad = [
        "# TYPE m counter\nm{a=\"x\"} 1\n# TYPE m counter\n",
        "m 1\n",
        "# TYPE 1m gauge\n1m 1\n",
        "# TYPE m gauge\nm{a=x} 1\n",
        "# TYPE m gauge\nm{a=\"x\\q\"} 1\n",
        "# TYPE m gauge\nm one\n",
        "# TYPE m gauge\n# TYPE n gauge\nm 1\nn 1\nm{a=\"b\"} 2\n",
    ];
    for body in bad {
        let r = std::panic::catch_unwind(|| validate(body));
        assert!(r.is_err(), "accepted {body:?}");
    }
    let ok = validate("# HELP m h\n# TYPE m gauge\nm{a=\"x\\\"y\",b=\"\"} +Inf\nm 1e3\n");
    assert_eq!(ok.len(), 2);
}

/// Ten frames to peer 7 alternating over NICs 0 and 1, and one transition of NIC 1.
fn feed(publisher: &Publisher) {
    let coll = CollId {
        comm: 1,
        op: Op::AllGather,
        seq: 1,
    };
    let w = |ts_ns, nic| Work {
        ts_ns,
        bytes: 4096,
        peer: 7,
        path: 0,
        nic,
        engine: Engine::Socket,
        unit: Unit::Frame,
        coll,
    };
    for i in 0..10u64 {
        publisher.post(&w(publisher.now_ns(), (i % 2) as u16));
        publisher.complete(&w(publisher.now_ns(), (i % 2) as u16));
    }
    publisher.transition(&Transition {
        ts_ns: publisher.now_ns(),
        scope: Scope::Nic(1),
        from: "up",
        to: "down",
        reason: "test",
    });
}

#[test]
fn metrics_endpoint_serves_valid_exposition_over_tcp() {
    let cfg = MonitorConfig {
        enabled: true,
        port: Some(0),
        ..MonitorConfig::default()
    };
    let mon = Monitor::new(&cfg).unwrap();
    feed(&mon.publisher());
    mon.flush().unwrap();
    let addr = mon.metrics_addr().unwrap();
    assert!(addr.ip().is_loopback());

    let (head, body) = get(addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    let samples = validate(&body);
    assert_eq!(
        samples[&key("ccl_monitor_bytes_total", "peer", "7")],
        40960.0
    );
    assert_eq!(
        samples[&key("ccl_monitor_completions_total", "nic", "0")],
        5.0
    );
    assert_eq!(
        samples[&key("ccl_monitor_completions_total", "nic", "1")],
        5.0
    );
    assert_eq!(samples[&key("ccl_monitor_outstanding", "path", "0")], 0.0);
    assert_eq!(
        samples[&("ccl_monitor_transitions_total".into(), vec![])],
        1.0
    );
    assert_eq!(
        samples[&("ccl_monitor_dropped_records_total".into(), vec![])],
        0.0
    );
    assert_eq!(samples[&("ccl_monitor_records_total".into(), vec![])], 21.0);
    for name in [
        "ccl_monitor_throughput_bytes_per_second",
        "ccl_monitor_anomalies_total",
        "ccl_monitor_stalls_total",
        "ccl_monitor_baseline_bytes_per_second",
    ] {
        assert!(samples.contains_key(&key(name, "peer", "7")), "{name}");
    }

    let (head, _) = get(addr, "/other");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    let snap = mon.snapshot();
    assert_eq!(snap.keys.len(), 4, "peer 7, path 0, nics 0 and 1");
    mon.shutdown().unwrap();
    assert!(
        TcpStream::connect(addr).is_err(),
        "the endpoint stops with the monitor"
    );
}
