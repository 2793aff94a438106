//! NCCL profiler plugins: a recording plugin (`tests/profiler/record_plugin.c`, built here with
//! `cc -shared -fPIC`) loaded through `NCCL_PROFILER_PLUGIN` by two host-backend ranks
//! (`ccl-profrank`). Each rank's file must hold exactly the events of its calls, with NCCL's
//! names and fields, every started event stopped in order, and the context finalised last.
//! Also: the activation mask is honoured, a version-4 plugin works, and a missing plugin or a
//! failing init leaves the job running with a warning.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ccl_tests::free_port;

/// A fresh directory for one test's files.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ccl-prof-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Builds the recording plugin (`defines` such as `-DRECORD_V4`) into `dir`.
fn build_plugin(dir: &Path, defines: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiler/record_plugin.c");
    let out = dir.join("librecord.so");
    // $CC, else cc, else gcc (what scripts/deps.sh installs).
    let compilers = std::env::var("CC")
        .into_iter()
        .chain(["cc".into(), "gcc".into()]);
    let st = compilers
        .filter_map(|c| {
            Command::new(c)
                .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror"])
                .args(defines)
                .arg("-o")
                .arg(&out)
                .arg(&src)
                .status()
                .ok()
        })
        .next()
        .expect("no C compiler (cc, gcc)");
    assert!(st.success(), "building {}", src.display());
    out
}

/// Runs both ranks with `env`; returns their stderr. Each must print `ok` and exit 0.
fn run_ranks(env: &[(&str, String)]) -> Vec<String> {
    let port = free_port();
    let mut children: Vec<_> = (0..2)
        .map(|r| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ccl-profrank"));
            c.env("CCL_RANK", r.to_string())
                .env("CCL_NRANKS", "2")
                .env("CCL_DEVICE", "host")
                .env("NCCL_COMM_ID", format!("127.0.0.1:{port}"))
                .env("NCCL_SOCKET_IFNAME", "lo")
                .env("CCL_BOOTSTRAP_TIMEOUT_S", "30")
                .env("NCCL_DEBUG", "WARN")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env {
                c.env(k, v);
            }
            c.spawn().unwrap()
        })
        .collect();
    let start = Instant::now();
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        if start.elapsed() > Duration::from_secs(120) {
            for c in children.iter_mut() {
                let _ = c.kill();
            }
            panic!("profiler ranks hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let (so, se) = (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
            assert!(
                out.status.success() && so.contains("ok"),
                "rank: {so}\n{se}"
            );
            se
        })
        .collect()
}

/// One line of a plugin file: its verb and its `key=value` fields.
#[derive(Debug)]
struct Line {
    verb: String,
    f: HashMap<String, String>,
}

impl Line {
    fn get(&self, k: &str) -> &str {
        self.f
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {k} in {self:?}"))
    }
    fn num(&self, k: &str) -> u64 {
        self.get(k).parse().unwrap()
    }
}

fn read_lines(path: &Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| {
            let mut words = l.split_whitespace();
            let verb = words.next().unwrap_or_default().to_string();
            let f = words
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Line { verb, f }
        })
        .collect()
}

/// The starts of one type, in order.
fn starts<'a>(lines: &'a [Line], ty: &str) -> Vec<&'a Line> {
    lines
        .iter()
        .filter(|l| l.verb == "start" && l.get("type") == ty)
        .collect()
}

/// Index of the line `verb id=<id>`.
fn at(lines: &[Line], verb: &str, id: u64) -> usize {
    let found: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].verb == verb && lines[i].num("id") == id)
        .collect();
    assert_eq!(found.len(), 1, "{verb} of event {id}: {found:?}");
    found[0]
}

/// Every started event is stopped exactly once, after its start and before `finalize`, the
/// last line.
fn all_stopped(lines: &[Line]) {
    assert_eq!(lines.last().map(|l| l.verb.as_str()), Some("finalize"));
    let fin = lines.len() - 1;
    for (i, l) in lines.iter().enumerate() {
        if l.verb == "start" {
            let s = at(lines, "stop", l.num("id"));
            assert!(
                i < s && s < fin,
                "event {} stopped out of order",
                l.num("id")
            );
        }
    }
    let n_starts = lines.iter().filter(|l| l.verb == "start").count();
    let n_stops = lines.iter().filter(|l| l.verb == "stop").count();
    assert_eq!(n_starts, n_stops);
}

/// What both plugin versions must see with the default mask (group, coll, p2p, kernel).
fn check_full(lines: &[Line], rank: u64) {
    let init = &lines[0];
    assert_eq!(init.verb, "init");
    assert_eq!(
        (
            init.num("rank"),
            init.num("nranks"),
            init.num("nnodes"),
            init.get("name")
        ),
        (rank, 2, 1, "prof-test")
    );
    all_stopped(lines);
    let groups: Vec<u64> = starts(lines, "group").iter().map(|l| l.num("id")).collect();
    assert_eq!(
        groups.len(),
        4,
        "one group per call outside a group, one for the group"
    );
    let colls = starts(lines, "coll");
    let got: Vec<String> = colls
        .iter()
        .map(|l| {
            let keys = [
                "func", "count", "dtype", "root", "seq", "nch", "algo", "proto",
            ];
            keys.map(|k| l.get(k)).join(" ")
        })
        .collect();
    assert_eq!(
        got,
        vec![
            "AllReduce 1024 ncclFloat32 0 0 1 Host Simple",
            "Broadcast 10 ncclFloat64 1 0 1 Host Simple",
            "AllReduce 1024 ncclFloat32 0 1 1 Host Simple",
        ]
    );
    let p2ps = starts(lines, "p2p");
    let peer = 1 - rank;
    let got: Vec<(&str, u64, &str, u64, u64)> = p2ps
        .iter()
        .map(|l| {
            (
                l.get("func"),
                l.num("count"),
                l.get("dtype"),
                l.num("peer"),
                l.num("nch"),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("Send", 256, "ncclInt32", peer, 1),
            ("Recv", 256, "ncclInt32", peer, 1),
        ]
    );
    // Each operation's group: the colls one each, the send and receive one together.
    let op_groups: Vec<u64> = colls.iter().chain(&p2ps).map(|l| l.num("group")).collect();
    assert_eq!(
        op_groups,
        vec![groups[0], groups[2], groups[3], groups[1], groups[1]]
    );
    // One kernel channel per operation, its end recorded (ncclProfilerKernelChStop) before
    // its stop, all before the operation's stop, which precedes its group's stop.
    let kernels = starts(lines, "kernel");
    assert_eq!(kernels.len(), 5);
    for op in colls.iter().chain(&p2ps) {
        let id = op.num("id");
        let k: Vec<&&Line> = kernels.iter().filter(|k| k.num("parent") == id).collect();
        assert_eq!(k.len(), 1, "kernel channel of operation {id}");
        let kid = k[0].num("id");
        assert_eq!(k[0].num("ch"), 0);
        let rec = at(lines, "record", kid);
        assert_eq!(lines[rec].num("state"), 22);
        assert!(lines[rec].num("t1") > k[0].num("t0"));
        assert!(rec < at(lines, "stop", kid));
        assert!(at(lines, "stop", kid) < at(lines, "stop", id));
        assert!(at(lines, "stop", id) < at(lines, "stop", op.num("group")));
    }
}

/// The API events a v5 plugin gets besides (NCCL starts them for a mask with any operation
/// bit): one group API event per group, recorded at the group's start-call end (23) and its
/// end-call start (24) and stopped after the group; one call event per operation, stopped
/// within the call and named as the operation's parent.
fn check_api(lines: &[Line]) {
    let gapis = starts(lines, "groupapi");
    assert_eq!(gapis.len(), 4);
    let groups = starts(lines, "group");
    for (ga, g) in gapis.iter().zip(&groups) {
        assert_eq!((ga.num("depth"), ga.num("captured")), (1, 0));
        let id = ga.num("id");
        let recs: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].verb == "record" && lines[i].num("id") == id)
            .collect();
        let states: Vec<u64> = recs.iter().map(|&i| lines[i].num("state")).collect();
        assert_eq!(states, vec![23, 24]);
        assert!(at(lines, "stop", id) > at(lines, "stop", g.num("id")));
    }
    let capis = starts(lines, "collapi");
    let got: Vec<String> = capis
        .iter()
        .map(|l| {
            ["func", "count", "dtype", "root"]
                .map(|k| l.get(k))
                .join(" ")
        })
        .collect();
    assert_eq!(
        got,
        vec![
            "AllReduce 1024 ncclFloat32 0",
            "Broadcast 10 ncclFloat64 1",
            "AllReduce 1024 ncclFloat32 0",
        ]
    );
    let papis = starts(lines, "p2papi");
    let got: Vec<String> = papis
        .iter()
        .map(|l| ["func", "count", "dtype"].map(|k| l.get(k)).join(" "))
        .collect();
    assert_eq!(got, vec!["Send 256 ncclInt32", "Recv 256 ncclInt32"]);
    let gapi_ids: Vec<u64> = gapis.iter().map(|l| l.num("id")).collect();
    let parents: Vec<u64> = capis
        .iter()
        .chain(&papis)
        .map(|l| l.num("parent"))
        .collect();
    assert_eq!(
        parents,
        vec![
            gapi_ids[0],
            gapi_ids[2],
            gapi_ids[3],
            gapi_ids[1],
            gapi_ids[1]
        ]
    );
    let ops: Vec<u64> = starts(lines, "coll")
        .iter()
        .chain(&starts(lines, "p2p"))
        .map(|l| l.num("parent"))
        .collect();
    let apis: Vec<u64> = capis.iter().chain(&papis).map(|l| l.num("id")).collect();
    assert_eq!(ops, apis);
}

#[test]
fn a_v5_plugin_sees_every_group_operation_and_kernel_channel() {
    let dir = scratch("v5");
    let lib = build_plugin(&dir, &[]);
    let prefix = dir.join("events");
    run_ranks(&[
        ("NCCL_PROFILER_PLUGIN", lib.display().to_string()),
        ("RECORD_PLUGIN_FILE", prefix.display().to_string()),
    ]);
    for r in 0..2u64 {
        let lines = read_lines(&dir.join(format!("events.{r}")));
        check_full(&lines, r);
        check_api(&lines);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_v4_plugin_gets_the_same_events() {
    let dir = scratch("v4");
    let lib = build_plugin(&dir, &["-DRECORD_V4"]);
    let prefix = dir.join("events");
    run_ranks(&[
        ("NCCL_PROFILER_PLUGIN", lib.display().to_string()),
        ("RECORD_PLUGIN_FILE", prefix.display().to_string()),
    ]);
    for r in 0..2u64 {
        let lines = read_lines(&dir.join(format!("events.{r}")));
        check_full(&lines, r);
        // Version 4 has no API events.
        assert!(!lines
            .iter()
            .any(|l| l.verb == "start" && l.get("type").ends_with("api")));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_activation_mask_is_honoured() {
    let dir = scratch("mask");
    let lib = build_plugin(&dir, &[]);
    let prefix = dir.join("events");
    // Collectives only: no kernel channels (so no channel is announced either), no p2p.
    run_ranks(&[
        ("NCCL_PROFILER_PLUGIN", lib.display().to_string()),
        ("RECORD_PLUGIN_FILE", prefix.display().to_string()),
        ("RECORD_PLUGIN_MASK", "2".to_string()),
    ]);
    for r in 0..2 {
        let lines = read_lines(&dir.join(format!("events.{r}")));
        all_stopped(&lines);
        assert_eq!(starts(&lines, "group").len(), 4);
        let colls = starts(&lines, "coll");
        assert_eq!(colls.len(), 3);
        assert!(colls.iter().all(|c| c.num("nch") == 0));
        assert!(starts(&lines, "p2p").is_empty());
        assert!(starts(&lines, "kernel").is_empty());
        // NCCL's rules: collectives bring group and call API events, but no p2p ones.
        assert_eq!(starts(&lines, "groupapi").len(), 4);
        assert_eq!(starts(&lines, "collapi").len(), 3);
        assert!(starts(&lines, "p2papi").is_empty());
        assert!(!lines
            .iter()
            .any(|l| l.verb == "record" && l.get("state") == "22"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_plugin_or_failing_init_only_warns() {
    let dir = scratch("absent");
    let errs = run_ranks(&[(
        "NCCL_PROFILER_PLUGIN",
        dir.join("libnccl-profiler-nothere.so")
            .display()
            .to_string(),
    )]);
    for e in &errs {
        assert!(e.contains("continuing without a profiler"), "{e}");
    }
    let lib = build_plugin(&dir, &[]);
    let errs = run_ranks(&[
        ("NCCL_PROFILER_PLUGIN", lib.display().to_string()),
        (
            "RECORD_PLUGIN_FILE",
            dir.join("events").display().to_string(),
        ),
        ("RECORD_PLUGIN_INIT_FAIL", "1".to_string()),
    ]);
    for e in &errs {
        assert!(e.contains("init failed with error 1"), "{e}");
    }
    assert!(!dir.join("events.0").exists());
    // `none` loads nothing and says nothing.
    let errs = run_ranks(&[("NCCL_PROFILER_PLUGIN", "none".to_string())]);
    assert!(errs.iter().all(|e| !e.contains("profiler")), "{errs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
