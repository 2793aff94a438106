//! `ncclCommRegister` and `ncclCommWindowRegister`: a buffer the caller will use again is
//! exported now (its IPC handle or VMM descriptor, once per allocation), so the direct paths
//! find it in the engine's cache instead of asking the driver while they queue an operation.
//! A symmetric window is also agreed with every rank ([`register_window`]).

use crate::control::CommCtx;
use crate::engine::IpcEngine;
use crate::error::Result;
use crate::layout::POST_WORDS;
use crate::rendezvous::{Post, Reach};
use crate::windows::Window;

/// Learns how peers will reach the allocation holding `ptr`. Memory that cannot be shared
/// (host memory, another device's) is remembered as such, which is as useful to the direct
/// paths. Host-only engines never map peers' buffers, so there is nothing to learn.
pub fn register(eng: &IpcEngine, ptr: usize) -> Result<()> {
    if eng.host_only {
        return Ok(());
    }
    let mut q = eng.queued.lock();
    q.bufs.export(ptr as u64).map(drop)
}

/// `ncclCommWindowRegister` with `NCCL_WIN_COLL_SYMMETRIC`, called by every rank in the same
/// order: each rank's window as its peers map it, exchanged now, so collectives on the windows
/// push without waiting for the receivers' posts (module `windows`). `false` (the window
/// stays a plain registration) where some rank's window cannot be mapped by its peers or the
/// sizes differ; every rank sees the same answers, so all decide alike.
pub fn register_window(comm: &CommCtx, eng: &IpcEngine, ptr: usize, size: usize) -> Result<bool> {
    // Off, this rank still takes part in the exchange (its peers wait for it), offering none.
    let mine = if eng.host_only || size == 0 || !eng.cfg.symmetric_windows {
        None
    } else {
        let mut q = eng.queued.lock();
        let pid = q.bufs.pid();
        q.bufs
            .export(ptr as u64)?
            .map(|ex| ex.post(pid, ptr as u64, size))
    };
    let all = comm.control.allgather(&encode(mine.as_ref()))?;
    let posts: Option<Vec<Post>> = all.iter().map(|b| decode(b)).collect();
    let rank = comm.rank();
    let Some(posts) = posts.filter(|p| p.iter().all(|p| p.bytes == size as u64)) else {
        tracing::info!(
            "rank {rank}: window of {size} bytes at {ptr:#x} not symmetric (a rank's cannot be \
             mapped, or the sizes differ): its collectives meet as any"
        );
        return Ok(false);
    };
    let peers = (0..posts.len())
        .map(|q| (q != rank).then_some(posts[q]))
        .collect();
    eng.windows.lock().add(Window {
        base: ptr as u64,
        size: size as u64,
        peers,
    });
    Ok(true)
}

/// `ncclCommWindowDeregister`: the window at `ptr` is no longer symmetric; false if it was
/// not one.
pub fn deregister_window(eng: &IpcEngine, ptr: usize) -> bool {
    eng.windows.lock().remove(ptr as u64)
}

/// A window's post on the control plane: a byte saying whether there is one, then its words.
fn encode(p: Option<&Post>) -> Vec<u8> {
    let mut b = vec![u8::from(p.is_some())];
    if let Some(p) = p {
        b.extend(p.to_words().iter().flat_map(|w| w.to_le_bytes()));
    }
    b
}

fn decode(b: &[u8]) -> Option<Post> {
    if b.first() != Some(&1) || b.len() != 1 + 8 * POST_WORDS {
        return None;
    }
    let mut w = [0u64; POST_WORDS];
    for (i, c) in b[1..].chunks_exact(8).enumerate() {
        w[i] = u64::from_le_bytes(c.try_into().ok()?);
    }
    Some(Post::from_words(&w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_post_survives_the_control_plane() {
        let p = Post {
            pid: 42,
            addr: 0x7f00_0000_1000,
            bytes: 1 << 30,
            buffer_id: 9,
            offset: 0x1000,
            handle: [5; 64],
            host_permille: 0,
        };
        assert_eq!(decode(&encode(Some(&p))), Some(p));
        assert_eq!(decode(&encode(None)), None);
        assert_eq!(decode(&[1, 2, 3]), None);
    }
}
