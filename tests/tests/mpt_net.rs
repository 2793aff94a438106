//! The mpt (UDP multipath) transport between ranks that count as different hosts: 2 rank
//! processes with distinct `CCL_HOSTID`, `CCL_NET=mpt`, all_reduce and alltoall checked
//! exactly, without and with 1% injected datagram loss; mpt as the default between hosts, and
//! what happens when no datagram gets through (the default falls back to TCP, mpt by name
//! fails init with a clear error).

#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ccl_tests::free_port;

fn run(n: usize, env: &[(&str, &str)]) {
    run_expecting(n, env, &["links 0shm,0socket,"]);
}

/// What one rank process left: its exit status, its standard output and its log.
struct Outcome {
    ok: bool,
    out: String,
    log: String,
}

/// Runs `n` rank processes as different hosts (`CCL_NET=mpt` unless `env` says otherwise; an
/// empty value unsets a variable) and collects how each ended.
fn ranks(n: usize, env: &[(&str, &str)]) -> Vec<Outcome> {
    let port = free_port();
    let dir = std::env::temp_dir();
    let mut children: Vec<_> = (0..n)
        .map(|r| {
            let err = dir.join(format!("ccl-mpt-{port}-{r}.err"));
            let mut c = Command::new(env!("CARGO_BIN_EXE_ccl-mptrank"));
            c.env("CCL_RANK", r.to_string())
                .env("CCL_NRANKS", n.to_string())
                .env("NCCL_COMM_ID", format!("127.0.0.1:{port}"))
                .env("NCCL_SOCKET_IFNAME", "lo")
                .env("CCL_BOOTSTRAP_TIMEOUT_S", "30")
                .env("CCL_HOSTID", format!("mpt-test-host-{r}"))
                .env("CCL_NET", "mpt")
                .env("NCCL_DEBUG", "INFO")
                .stdout(Stdio::piped())
                .stderr(Stdio::from(std::fs::File::create(&err).unwrap()));
            for (k, v) in env {
                if v.is_empty() {
                    c.env_remove(k);
                } else {
                    c.env(k, v);
                }
            }
            (c.spawn().unwrap(), err)
        })
        .collect();
    let start = Instant::now();
    let mut outcomes: Vec<Option<Outcome>> = (0..n).map(|_| None).collect();
    while outcomes.iter().any(Option::is_none) {
        if start.elapsed() > Duration::from_secs(240) {
            for (c, _) in &mut children {
                let _ = c.kill();
            }
            panic!("ranks did not finish in time");
        }
        for (i, (c, err)) in children.iter_mut().enumerate() {
            if outcomes[i].is_some() {
                continue;
            }
            if let Some(st) = c.try_wait().unwrap() {
                let mut out = String::new();
                use std::io::Read;
                c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
                let log = std::fs::read_to_string(&*err).unwrap_or_default();
                outcomes[i] = Some(Outcome {
                    ok: st.success(),
                    out,
                    log,
                });
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    outcomes.into_iter().flatten().collect()
}

/// [`ranks`]; every rank succeeds (exact results) and its log holds each of `expect`.
fn run_expecting(n: usize, env: &[(&str, &str)], expect: &[&str]) {
    let outs = ranks(n, env);
    // Every rank's output and log: the first to fail is often not the one that says why.
    let all = || {
        outs.iter()
            .enumerate()
            .map(|(i, o)| format!("==== rank {i}:\n{}\n{}", o.out, o.log))
            .collect::<String>()
    };
    for (i, o) in outs.iter().enumerate() {
        assert!(o.ok && o.out.contains("ok"), "rank {i} failed\n{}", all());
        for e in expect {
            assert!(o.log.contains(e), "rank {i} log lacks {e:?}:\n{}", o.log);
        }
    }
}

#[test]
fn mpt_two_hosts_exact() {
    run(2, &[]);
}

/// Sends complete once their frames have left, before the peer acknowledges them: rank 0
/// sends 12 small messages under 20% datagram loss and destroys its communicator at once,
/// rank 1 reads them 300 ms later. The destroy waits for rank 1's side to confirm them
/// (resending what was lost), so every message arrives intact.
#[test]
fn sends_then_destroy_under_loss_deliver_everything() {
    let outs = ranks(2, &[("CCL_TEST_TAIL", "12"), ("CCL_MPT_DROP", "0.2")]);
    for (i, o) in outs.iter().enumerate() {
        assert!(
            o.ok && o.out.contains("ok"),
            "rank {i}:\n{}\n{}",
            o.out,
            o.log
        );
        assert!(!o.log.contains("did not confirm"), "rank {i}:\n{}", o.log);
    }
}

#[test]
fn mpt_two_hosts_exact_with_one_percent_loss() {
    run(2, &[("CCL_MPT_DROP", "0.01")]);
}

/// Two-rank all-reduces of every size in one exchange (each rank folds the other's whole
/// input as it arrives; in place each frame is sent before the fold overwrites it), with
/// loss: exact, out of place and in place.
#[test]
fn mpt_two_hosts_exchange_all_reduce_exact_with_loss() {
    run(
        2,
        &[
            ("CCL_ALLREDUCE_EXCHANGE_BYTES", "1"),
            ("CCL_ALLREDUCE_EXCHANGE_MAX_BYTES", "1073741824"),
            ("CCL_MPT_DROP", "0.01"),
        ],
    );
}

/// Ring collectives with their steps run as one (each send forwarding frames as the receive
/// before it lands), three ranks, with loss: exact, out of place and in place.
#[test]
fn mpt_three_hosts_ring_in_one_step_exact_with_loss() {
    run(3, &[("CCL_RING_ONE_STEP", "1"), ("CCL_MPT_DROP", "0.01")]);
}

/// Received frames copied and reduced in parts on helper threads (a low threshold, so most
/// frames split), over two engines: still exact.
#[test]
fn mpt_two_hosts_exact_with_copy_threads() {
    run_expecting(
        2,
        &[
            ("CCL_COPY_THREADS", "2"),
            ("CCL_COPY_PARALLEL_BYTES", "4096"),
            ("CCL_MPT_ENGINES", "2"),
        ],
        &[
            "links 0shm,0socket,",
            "2 copy threads for frames of >= 4096 bytes",
        ],
    );
}

/// Deferred sends: the copy threads copy outgoing frames into the engines' send slots while
/// the executor receives and reduces (a low threshold, so most frames go that way), two
/// engines, with loss: still exact.
#[test]
fn mpt_two_hosts_exact_with_async_send_copies() {
    run_expecting(
        2,
        &[
            ("CCL_MPT_ASYNC_COPY", "1"),
            ("CCL_COPY_THREADS", "2"),
            ("CCL_COPY_PARALLEL_BYTES", "4096"),
            ("CCL_MPT_ENGINES", "2"),
            ("CCL_MPT_DROP", "0.01"),
        ],
        &[
            "links 0shm,0socket,",
            "2 copy threads for frames of >= 4096 bytes",
        ],
    );
}

/// Three hosts, two engines per link, 1% loss: frames up to `CCL_MPT_INLINE_BYTES` (the
/// default) go on each link's lead engine, driven by the executors themselves, the rest over
/// both engines; against the same run with inline frames off: exact either way.
#[test]
fn mpt_three_hosts_two_engines_inline_frames_with_loss() {
    for inline in ["262144", "0"] {
        run(
            3,
            &[
                ("CCL_MPT_ENGINES", "2"),
                ("CCL_MPT_DROP", "0.01"),
                ("CCL_MPT_INLINE_BYTES", inline),
            ],
        );
    }
}

#[test]
fn mpt_three_hosts_swift_few_paths() {
    run(3, &[("CCL_MPT_CC", "swift"), ("CCL_MPT_PATHS", "2")]);
}

/// Neither CCL_NET nor NCCL_NET set: the ranks, on different hosts, link over mpt.
#[test]
fn mpt_is_the_default_between_hosts() {
    run_expecting(2, &[("CCL_NET", "")], &["links 0shm,0socket,1mpt"]);
}

/// By default, a pair whose datagrams never get through (all of them dropped) falls back to
/// TCP over the same stream, says so, and computes exactly.
#[test]
fn the_default_falls_back_to_tcp_when_no_datagram_gets_through() {
    run_expecting(
        2,
        &[
            ("CCL_NET", ""),
            ("CCL_MPT_DROP", "1"),
            ("CCL_MPT_PROBE_MS", "300"),
        ],
        &[
            "links 0shm,1socket",
            "using TCP for it",
            "within 300 ms (UDP blocked?)",
        ],
    );
}

/// Asked for by name, mpt whose datagrams never get through fails init on both ranks with an
/// error naming the cause and the way out, instead of hanging.
#[test]
fn mpt_by_name_fails_init_when_no_datagram_gets_through() {
    let outs = ranks(2, &[("CCL_MPT_DROP", "1"), ("CCL_MPT_PROBE_MS", "300")]);
    for (i, o) in outs.iter().enumerate() {
        assert!(!o.ok, "rank {i} should have failed:\n{}", o.out);
        assert!(
            o.log.contains("UDP blocked?") && o.log.contains("CCL_NET=socket"),
            "rank {i}:\n{}",
            o.log
        );
    }
}

/// With `CCL_MONITOR=1` each rank's monitor writes its file (`%p`: one per process) with
/// throughput samples of its peer, and the communicator's destroy completes it.
#[test]
fn the_monitor_records_each_ranks_peer() {
    let dir = std::env::temp_dir().join(format!("ccl-monitor-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mon.%p.jsonl");
    run(
        2,
        &[
            ("CCL_MONITOR", "1"),
            ("CCL_MONITOR_FILE", file.to_str().unwrap()),
        ],
    );
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let peer_samples = text
            .lines()
            .filter(|l| l.contains(r#""type":"sample","scope":"peer""#))
            .count();
        assert!(peer_samples > 0, "{}: no peer samples", f.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
