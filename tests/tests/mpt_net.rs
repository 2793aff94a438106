//! The mpt (UDP multipath) transport between ranks that count as different hosts: 2 rank
//! processes with distinct `CCL_HOSTID`, `CCL_NET=mpt`, all_reduce and alltoall checked
//! exactly, without and with 1% injected datagram loss.

#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run(n: usize, env: &[(&str, &str)]) {
    run_expecting(n, env, &[]);
}

/// [`run`], and every rank's log holds each of `expect`.
fn run_expecting(n: usize, env: &[(&str, &str)], expect: &[&str]) {
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
                c.env(k, v);
            }
            (c.spawn().unwrap(), err)
        })
        .collect();
    let start = Instant::now();
    let mut done = vec![false; n];
    while done.iter().any(|d| !d) {
        if start.elapsed() > Duration::from_secs(240) {
            for (c, _) in &mut children {
                let _ = c.kill();
            }
            panic!("ranks did not finish in time");
        }
        for (i, (c, err)) in children.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            if let Some(st) = c.try_wait().unwrap() {
                let mut out = String::new();
                use std::io::Read;
                c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
                let log = std::fs::read_to_string(&*err).unwrap_or_default();
                assert!(
                    st.success() && out.contains("ok"),
                    "rank {i}: {st}\n{out}\n{log}"
                );
                // The links are neither shm nor TCP sockets: they are mpt.
                assert!(log.contains("links 0shm,0socket,"), "rank {i} log:\n{log}");
                for e in expect {
                    assert!(log.contains(e), "rank {i} log lacks {e:?}:\n{log}");
                }
                done[i] = true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn mpt_two_hosts_exact() {
    run(2, &[]);
}

#[test]
fn mpt_two_hosts_exact_with_one_percent_loss() {
    run(2, &[("CCL_MPT_DROP", "0.01")]);
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
        &["2 copy threads for frames of >= 4096 bytes"],
    );
}

#[test]
fn mpt_three_hosts_swift_few_paths() {
    run(3, &[("CCL_MPT_CC", "swift"), ("CCL_MPT_PATHS", "2")]);
}
