//! Breakpoint agreement for one connection: where a transfer stands on each side, and how
//! both sides agree on where to resume after a link fails, so that no byte is lost and none
//! is delivered twice.
//!
//! The sender counts bytes *posted* (handed to it to send), *transmitted* (put on a link)
//! and *acked* (confirmed by the receiver); the receiver counts bytes *posted* (buffer space
//! granted by clear-to-send), *received* (landed, in order) and *done* (landed and committed,
//! visible to the consumer and acknowledged). Data landed but not committed (`received >
//! done`) is not trusted after a failure: a chunk cut in the middle may be half written.
//!
//! ```text
//! event                      receiver                        sender
//! link failure seen by rx    received := done, epoch + 1,    on Rollback: transmitted :=
//!                            Rollback{epoch, done} on the    acked := done, resume there
//!                            other link                      on the other link
//! link failure seen by tx    on RollbackRequest: as above    RollbackRequest{epoch + 1} on
//!                                                            the other link, send nothing
//!                                                            until the Rollback
//! ```
//!
//! Every rollback starts a new *epoch*; data and commits carry theirs, and the receiver
//! drops those of an older epoch (still in flight on the failed link), so a late chunk can
//! neither be delivered twice nor commit bytes the new epoch has not sent. Within an epoch
//! chunks may arrive out of order (after a switch back to the primary, the last chunks on
//! the backup can be overtaken): the receiver holds them until the gap is filled.
//!
//! Invariants, checked on every message and reported as [`Error`], never panicking:
//! sender `acked <= transmitted <= min(posted, credit)`, receiver `done <= received <=
//! posted`, and a rollback lands in `[acked, transmitted]`.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// A message of the breakpoint protocol (and of link probing, which travels the same
/// links), as plain data for the transport to carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Message {
    /// Receiver to sender: buffer space granted up to byte `posted` (cumulative).
    Cts {
        /// Bytes posted so far.
        posted: u64,
    },
    /// Sender to receiver: the payload of bytes `offset..offset + len` (one chunk).
    Data {
        /// The sender's epoch.
        epoch: u32,
        /// First byte.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// Sender to receiver: the chunk starting at `offset` is complete (its payload was
    /// sent before this on the same link).
    Commit {
        /// The sender's epoch.
        epoch: u32,
        /// First byte of the chunk.
        offset: u64,
    },
    /// Receiver to sender: every byte below `done` is committed.
    Ack {
        /// The receiver's epoch.
        epoch: u32,
        /// Bytes done.
        done: u64,
    },
    /// Sender to receiver: the sender gave up on its link; roll back and start `epoch`.
    RollbackRequest {
        /// The epoch to start.
        epoch: u32,
    },
    /// Receiver to sender: rolled back to `done`, now in `epoch`; resume from `done`. It
    /// repeats the grant, since clear-to-sends may have been lost with the failed link.
    Rollback {
        /// The receiver's new epoch.
        epoch: u32,
        /// Bytes done, where the sender resumes.
        done: u64,
        /// Bytes posted so far (as in [`Message::Cts`]).
        posted: u64,
    },
    /// Either way: is this link alive? (The receiver's is its clear-to-send re-sent.)
    Probe {
        /// Echoed in the answer.
        seq: u64,
    },
    /// Either way: the answer to probe `seq`, on the link the probe came on.
    ProbeAnswer {
        /// The probe's sequence number.
        seq: u64,
    },
}

/// Bytes `offset..offset + len` of the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

impl Chunk {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// The sender's side of one connection.
#[derive(Clone, Debug)]
pub struct SenderLedger {
    chunk_size: u64,
    epoch: u32,
    posted: u64,
    credit: u64,
    transmitted: u64,
    acked: u64,
}

impl SenderLedger {
    /// An empty ledger cutting the stream into chunks of `chunk_size` bytes.
    pub fn new(chunk_size: u64) -> Result<Self> {
        if chunk_size == 0 {
            return Err(Error::InvalidConfig("chunk_size is zero"));
        }
        Ok(SenderLedger {
            chunk_size,
            epoch: 0,
            posted: 0,
            credit: 0,
            transmitted: 0,
            acked: 0,
        })
    }

    /// The current epoch (data and commits carry it).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Bytes handed to the sender.
    pub fn posted(&self) -> u64 {
        self.posted
    }

    /// Buffer space the receiver granted.
    pub fn credit(&self) -> u64 {
        self.credit
    }

    /// Bytes put on a link (in this epoch's count: a rollback takes it back).
    pub fn transmitted(&self) -> u64 {
        self.transmitted
    }

    /// Bytes the receiver confirmed.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Every byte posted is acknowledged.
    pub fn is_complete(&self) -> bool {
        self.acked == self.posted
    }

    /// Posted data waits for buffer space the receiver has not granted yet.
    pub fn wants_credit(&self) -> bool {
        self.credit < self.posted
    }

    /// `len` more bytes to send.
    pub fn post(&mut self, len: u64) {
        self.posted = self.posted.saturating_add(len);
    }

    /// A clear-to-send up to `posted`. A smaller grant than one already seen is an older
    /// message overtaken on the other link (or a re-sent probe), not a shrink: ignored.
    pub fn handle_cts(&mut self, posted: u64) {
        self.credit = self.credit.max(posted);
    }

    /// The next chunk to transmit: from `transmitted` to the next multiple of the chunk
    /// size, cut short by what is posted and granted. Aligned boundaries make a resent
    /// chunk after a rollback (always to a chunk boundary) the same chunk as before.
    pub fn next_chunk(&self) -> Option<Chunk> {
        let limit = self.posted.min(self.credit);
        if self.transmitted >= limit {
            return None;
        }
        let boundary = (self.transmitted / self.chunk_size + 1).saturating_mul(self.chunk_size);
        Some(Chunk {
            offset: self.transmitted,
            len: boundary.min(limit) - self.transmitted,
        })
    }

    /// Takes the next chunk: it counts as transmitted.
    pub fn take_chunk(&mut self) -> Option<Chunk> {
        let chunk = self.next_chunk()?;
        self.transmitted = chunk.end();
        Some(chunk)
    }

    /// An acknowledgement: returns whether it advanced `acked`. One of an older epoch, or
    /// behind one already seen (overtaken on the other link), is ignored.
    pub fn handle_ack(&mut self, epoch: u32, done: u64) -> Result<bool> {
        if epoch > self.epoch {
            // The receiver's rollback travels ahead of its acks on the same link.
            return Err(Error::FutureEpoch {
                got: epoch,
                current: self.epoch,
            });
        }
        if epoch < self.epoch || done <= self.acked {
            return Ok(false);
        }
        if done > self.transmitted {
            return Err(Error::AckBeyondTransmitted {
                done,
                transmitted: self.transmitted,
            });
        }
        self.acked = done;
        Ok(true)
    }

    /// The receiver rolled back to `done` and started `epoch`: returns where to resume
    /// (`done`), or `None` for a rollback this side already took (a repeat answering a
    /// second request).
    pub fn handle_rollback(&mut self, epoch: u32, done: u64) -> Result<Option<u64>> {
        if epoch <= self.epoch {
            return Ok(None);
        }
        if done < self.acked {
            return Err(Error::RollbackBelowAcked {
                done,
                acked: self.acked,
            });
        }
        if done > self.transmitted {
            return Err(Error::RollbackBeyondTransmitted {
                done,
                transmitted: self.transmitted,
            });
        }
        self.epoch = epoch;
        self.acked = done;
        self.transmitted = done;
        Ok(Some(done))
    }
}

/// A chunk landed beyond `done`, in this epoch.
#[derive(Clone, Copy, Debug)]
struct Landed {
    end: u64,
    committed: bool,
}

/// The receiver's side of one connection.
#[derive(Clone, Debug, Default)]
pub struct ReceiverLedger {
    epoch: u32,
    posted: u64,
    received: u64,
    done: u64,
    /// Chunks at or beyond `done`, by first byte: what `received` and `done` advance over.
    landed: BTreeMap<u64, Landed>,
}

impl ReceiverLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        ReceiverLedger::default()
    }

    /// The current epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Buffer space granted.
    pub fn posted(&self) -> u64 {
        self.posted
    }

    /// Bytes landed in order.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Bytes landed and committed in order: what the consumer may use.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Granted space is not all done: data is owed.
    pub fn wants_data(&self) -> bool {
        self.done < self.posted
    }

    /// `len` more bytes of buffer space: returns the new grant, for the clear-to-send.
    pub fn post(&mut self, len: u64) -> u64 {
        self.posted = self.posted.saturating_add(len);
        self.posted
    }

    fn check_epoch(&self, epoch: u32) -> Result<bool> {
        if epoch > self.epoch {
            // A new epoch starts only with this side's rollback.
            return Err(Error::FutureEpoch {
                got: epoch,
                current: self.epoch,
            });
        }
        Ok(epoch == self.epoch)
    }

    /// A chunk's payload landed: returns whether it was taken (`false`: an older epoch's,
    /// to be dropped; its bytes are not to be used).
    pub fn handle_data(&mut self, epoch: u32, offset: u64, len: u64) -> Result<bool> {
        if !self.check_epoch(epoch)? {
            return Ok(false);
        }
        let end = offset.saturating_add(len);
        if end > self.posted {
            return Err(Error::BeyondPosted {
                end,
                posted: self.posted,
            });
        }
        let overlaps = offset < self.done
            || self
                .landed
                .range(..end)
                .next_back()
                .is_some_and(|(_, l)| l.end > offset);
        if overlaps {
            return Err(Error::Overlap { offset });
        }
        if len > 0 {
            let committed = false;
            self.landed.insert(offset, Landed { end, committed });
        }
        while let Some(l) = self.landed.get(&self.received) {
            self.received = l.end;
        }
        Ok(true)
    }

    /// A chunk's commit: returns whether `done` advanced (an ack is due), `false` also for
    /// an older epoch's commit.
    pub fn handle_commit(&mut self, epoch: u32, offset: u64) -> Result<bool> {
        if !self.check_epoch(epoch)? {
            return Ok(false);
        }
        match self.landed.get_mut(&offset) {
            Some(l) => l.committed = true,
            None => return Err(Error::CommitUnreceived { offset }),
        }
        let before = self.done;
        while let Some(l) = self.landed.get(&self.done).filter(|l| l.committed) {
            let end = l.end;
            self.landed.remove(&self.done);
            self.done = end;
        }
        Ok(self.done > before)
    }

    /// Rolls back to `done` and starts a new epoch, at least `min_epoch` (the one a
    /// sender's request asks for). Returns the [`Message::Rollback`] for the sender.
    pub fn roll_back(&mut self, min_epoch: u32) -> Message {
        self.epoch = self.epoch.saturating_add(1).max(min_epoch);
        self.received = self.done;
        self.landed.clear();
        self.rollback_message()
    }

    /// The [`Message::Rollback`] for the current epoch (sent again when a sender's request
    /// finds the rollback already made).
    pub fn rollback_message(&self) -> Message {
        Message::Rollback {
            epoch: self.epoch,
            done: self.done,
            posted: self.posted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(credit: u64, posted: u64) -> SenderLedger {
        let mut s = SenderLedger::new(100).unwrap();
        s.post(posted);
        s.handle_cts(credit);
        s
    }

    #[test]
    fn chunks_end_on_aligned_boundaries_and_stop_at_credit() {
        let mut s = sender(250, 1000);
        let ends: Vec<_> = std::iter::from_fn(|| s.take_chunk().map(|c| c.end())).collect();
        assert_eq!(ends, [100, 200, 250]);
        s.handle_cts(120); // an older grant overtaken: ignored
        s.handle_cts(420);
        assert_eq!(
            s.take_chunk(),
            Some(Chunk {
                offset: 250,
                len: 50
            })
        );
        assert_eq!(s.next_chunk().map(|c| c.end()), Some(400));
        assert!(s.wants_credit());
    }

    #[test]
    fn acks_are_checked_against_transmitted() {
        let mut s = sender(300, 300);
        s.take_chunk();
        assert_eq!(
            s.handle_ack(0, 200),
            Err(Error::AckBeyondTransmitted {
                done: 200,
                transmitted: 100
            })
        );
        assert_eq!(s.handle_ack(0, 100), Ok(true));
        assert_eq!(s.handle_ack(0, 50), Ok(false));
        assert!(matches!(
            s.handle_ack(1, 100),
            Err(Error::FutureEpoch { .. })
        ));
    }

    #[test]
    fn rollback_lands_between_acked_and_transmitted() {
        let mut s = sender(300, 300);
        s.take_chunk();
        s.take_chunk();
        s.handle_ack(0, 100).unwrap();
        let below = s.handle_rollback(1, 50);
        assert_eq!(
            below,
            Err(Error::RollbackBelowAcked {
                done: 50,
                acked: 100
            })
        );
        let beyond = s.handle_rollback(1, 250);
        assert!(matches!(
            beyond,
            Err(Error::RollbackBeyondTransmitted { .. })
        ));
        assert_eq!(s.handle_rollback(1, 100), Ok(Some(100)));
        assert_eq!((s.epoch(), s.transmitted(), s.acked()), (1, 100, 100));
        assert_eq!(s.handle_rollback(1, 200), Ok(None), "a repeat");
        assert_eq!(s.handle_ack(0, 200), Ok(false), "an older epoch's ack");
        assert_eq!(
            s.take_chunk(),
            Some(Chunk {
                offset: 100,
                len: 100
            })
        );
    }

    #[test]
    fn receiver_advances_received_and_done_in_order() {
        let mut r = ReceiverLedger::new();
        r.post(300);
        assert_eq!(r.handle_data(0, 100, 100), Ok(true));
        assert_eq!(r.received(), 0, "gap before it");
        assert_eq!(r.handle_commit(0, 100), Ok(false));
        assert_eq!(r.handle_data(0, 0, 100), Ok(true));
        assert_eq!((r.received(), r.done()), (200, 0));
        assert_eq!(r.handle_commit(0, 0), Ok(true));
        assert_eq!(r.done(), 200);
        assert!(r.wants_data());
    }

    #[test]
    fn receiver_rejects_violations() {
        let mut r = ReceiverLedger::new();
        r.post(200);
        let beyond = r.handle_data(0, 150, 100);
        assert_eq!(
            beyond,
            Err(Error::BeyondPosted {
                end: 250,
                posted: 200
            })
        );
        r.handle_data(0, 0, 100).unwrap();
        assert_eq!(
            r.handle_data(0, 50, 100),
            Err(Error::Overlap { offset: 50 })
        );
        r.handle_commit(0, 0).unwrap();
        assert_eq!(r.handle_data(0, 0, 100), Err(Error::Overlap { offset: 0 }));
        assert_eq!(
            r.handle_commit(0, 100),
            Err(Error::CommitUnreceived { offset: 100 })
        );
        assert!(matches!(
            r.handle_data(3, 100, 1),
            Err(Error::FutureEpoch { .. })
        ));
    }

    #[test]
    fn rollback_discards_uncommitted_data_and_older_epochs() {
        let mut r = ReceiverLedger::new();
        r.post(300);
        r.handle_data(0, 0, 100).unwrap();
        r.handle_commit(0, 0).unwrap();
        r.handle_data(0, 100, 100).unwrap();
        assert_eq!(
            r.roll_back(0),
            Message::Rollback {
                epoch: 1,
                done: 100,
                posted: 300
            }
        );
        assert_eq!(r.received(), 100);
        assert_eq!(r.handle_commit(0, 100), Ok(false), "older epoch");
        assert_eq!(r.handle_data(0, 200, 100), Ok(false), "older epoch");
        assert_eq!(r.handle_data(1, 100, 100), Ok(true));
        assert_eq!(
            r.roll_back(5),
            Message::Rollback {
                epoch: 5,
                done: 100,
                posted: 300
            }
        );
    }
}
