//! The crate's face as `ccl` uses it: every name and signature it calls, pinned, so that
//! moving the engine's code between files inside the crate cannot change what its owner
//! sees. A change here is a change of `ccl`'s code too.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use ccl_collectives::task::Task;
use ccl_cuda::cuda::{Context, Kernels};
use ccl_p2p::config::P2pConfig as ConfigModule;
use ccl_p2p::control::{CommCtx as ControlCommCtx, Control as ControlTrait};
use ccl_p2p::error::{Error as ErrorModule, ErrorKind as ErrorKindModule};
use ccl_p2p::{CommCtx, Control, Error, ErrorKind, IpcEngine, P2pConfig, PeerHealth, Result};

/// What `submit` takes: every communicator's group.
type Groups = Vec<(CommCtx, Arc<IpcEngine>, Vec<Task>)>;

/// The same types whether named through the crate root or through their modules.
fn same<T>(_: std::marker::PhantomData<T>, _: std::marker::PhantomData<T>) {}

#[test]
fn the_engines_functions_keep_their_signatures() {
    let _: fn(&Arc<Context>, bool) -> Result<Arc<Kernels>> = ccl_p2p::kernels_for;
    let _: fn(&CommCtx, &P2pConfig) -> Result<Option<Arc<IpcEngine>>> = ccl_p2p::attach;
    let _: fn(&[Task]) -> bool = ccl_p2p::takes;
    let _: fn(Groups) -> Result<()> = ccl_p2p::submit;
    let _: fn(&CommCtx, &IpcEngine) = ccl_p2p::check_health;
    let _: fn(&IpcEngine, &AtomicBool) -> Result<()> = ccl_p2p::wait_idle;
    let _: fn(Arc<IpcEngine>, bool) = ccl_p2p::shutdown;
    let _: fn(&CommCtx, &IpcEngine, &[Task]) -> Result<bool> = ccl_p2p::capture;
}

#[test]
fn the_modules_and_the_root_name_the_same_types() {
    use std::marker::PhantomData as P;
    same::<P2pConfig>(P, P::<ConfigModule>);
    same::<CommCtx>(P, P::<ControlCommCtx>);
    same::<Error>(P, P::<ErrorModule>);
    same::<ErrorKind>(P, P::<ErrorKindModule>);
    same::<Result<()>>(P, P::<ccl_p2p::error::Result<()>>);
    fn as_control(c: &dyn ControlTrait) -> &dyn Control {
        c
    }
    let _ = as_control;
    let _ = |h: PeerHealth| match h {
        PeerHealth::Ok | PeerHealth::NeededPeerLeft(_) | PeerHealth::Failed(_) => (),
    };
}

#[test]
fn the_engine_travels_between_threads_and_prints() {
    fn send_sync_debug<T: Send + Sync + std::fmt::Debug>() {}
    send_sync_debug::<IpcEngine>();
}
