//! [`MptLink`]: a [`Link`] over multipath [`Connection`]s on the UDP datapath.
//!
//! A link runs `engines` (1..=16) independent sub-links, each with its own connection, set
//! of UDP paths and engine thread ("a progress thread per NIC/engine").
//!
//! Each engine owns two preallocated slabs of `slots` messages of its largest message each
//! (with several engines the largest message is a whole frame up to `split_bytes` or one
//! engine's part of a longer frame, so N engines do not take N times the memory):
//! * sending copies a message into the next send slot and queues it; at most `slots`
//!   messages are unacknowledged per engine, beyond that the engine is full;
//! * every receive slot is posted to the connection up front; arriving chunks are copied to
//!   their offset in the slot; a completed slot is read in place and then posted again.
//!
//! With one engine (the default) one link frame is one mpt message, exactly as before
//! engines existed: no extra header, the same hello, the same wire bytes.
//!
//! With several engines every message starts with a 16-byte part header (frame sequence
//! number, frame length, part index and count). A frame longer than `split_bytes` is cut
//! into one near-equal part per engine (part `i` on engine `i`, cut at multiples of
//! [`PIECE_ALIGN`]); a shorter frame goes whole to the least-loaded engine (fewest
//! unacknowledged bytes, then messages). Each engine is FIFO and the sender numbers frames
//! in order, so the next frame is always at the head of the engine(s) carrying it: the
//! receiver finds it there and shows it in place, a split frame part by part as pieces
//! (see [`Link::peek`]): joining the parts cost the receiving thread one more copy of every
//! byte, and that thread's copies are what limits a link of several engines.
//!
//! Progress (receive datagrams, fire timers, transmit) runs under a per-engine mutex. With
//! one engine the link's user runs it inline and the engine thread covers for it when the
//! user stops polling (acknowledgements and retransmissions for the last message of an
//! operation must still flow while the executor waits elsewhere). With several engines the
//! engine threads do it, in parallel, and the user queues and takes messages, waking a
//! sleeping engine through a socket pair -- except for small frames (`inline_bytes`): those go
//! whole on the lead engine (engine 0), which the user then drives itself while it waits for
//! them, as on a one-engine link. A small operation would otherwise wait for an engine thread
//! to wake on each side for the data and again for its acknowledgement; the user hands the
//! lead engine back to its thread (waking it) before any larger frame goes or comes.
//!
//! Setup: [`MptLink::over_tcp`] exchanges a hello (magic; with several engines the engine
//! count, largest frame and split size; per engine a flow id, path count and ports) over an
//! already connected TCP stream and keeps the stream open with the link. Both sides run the
//! smaller engine count; with several engines the largest frame and split size must agree:
//! a difference fails setup on both sides with an error naming it. [`MptLink::probe`] then
//! checks that datagrams get through both ways before the link carries data.

#[cfg(doc)]
use crate::{mpt::Connection, Link, PIECE_ALIGN};

mod config;
mod engine;
mod follow;
mod hello;
mod link;
mod monitor;
mod parts;
mod progress;
mod recv;
mod send;
mod setup;
mod shared;
mod slab;

pub use config::{MptLinkConfig, MAX_ENGINES, MAX_NICS};
pub use link::MptLink;
pub use setup::MptEndpoint;
