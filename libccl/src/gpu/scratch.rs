//! A GPU scratch buffer for work queued on callers' streams.

use std::sync::Arc;

use ccl_cuda::cuda::{self, Context, Event, Stream};

use super::device::{cuda_err, plain_event};
use crate::error::{Error, Result};

/// A GPU scratch buffer reused by work queued on callers' streams: a communicator's folded
/// reductions (the operands received land in it and, for scaled reductions, this rank's scaled
/// operands) and a hierarchy's partial reductions ([`crate::hier`]).
#[derive(Default)]
pub(crate) struct StreamScratch {
    buf: Option<cuda::DeviceBuffer>,
    /// Recorded on each stream of the last group that used `buf`, after its folds: the next
    /// group's streams wait for them before anything writes `buf` again (groups may come on
    /// different streams).
    last_use: Vec<Event>,
    /// Events for the next recording.
    spare: Vec<Event>,
    /// Buffers outgrown while queued work may still read them: freed once that work is done.
    retired: Vec<(cuda::DeviceBuffer, Vec<Event>)>,
}

impl StreamScratch {
    /// A scratch of at least `bytes` for work queued next on `streams`, which are made to wait
    /// for the previous group's use of it.
    pub(crate) fn claim(
        &mut self,
        ctx: &Arc<Context>,
        bytes: usize,
        streams: &[Stream],
    ) -> Result<u64> {
        self.retired
            .retain(|(_, evs)| !evs.iter().all(|ev| ev.query().unwrap_or(false)));
        if !self.buf.as_ref().is_some_and(|b| b.len() >= bytes) {
            if let Some(old) = self.buf.take() {
                self.retired.push((old, std::mem::take(&mut self.last_use)));
            }
            // Whole MiBs, so nearby sizes share one buffer.
            let cap = bytes.max(1).div_ceil(1 << 20) << 20;
            self.buf = Some(cuda::DeviceBuffer::new(ctx, cap).map_err(cuda_err)?);
        }
        for s in streams {
            for ev in &self.last_use {
                s.wait_event(ev).map_err(cuda_err)?;
            }
        }
        self.buf
            .as_ref()
            .map(|b| b.ptr())
            .ok_or_else(|| Error::internal("fold scratch missing"))
    }

    /// Waits for the work queued on it so far (before it is freed under that work).
    pub(crate) fn settle(&self) {
        for ev in self
            .last_use
            .iter()
            .chain(self.retired.iter().flat_map(|(_, evs)| evs))
        {
            let _ = ev.synchronize();
        }
    }

    /// Bytes of GPU memory it holds, retired buffers included.
    pub(crate) fn bytes(&self) -> u64 {
        let retired = self.retired.iter().map(|(b, _)| b.len());
        (self.buf.iter().map(|b| b.len()).sum::<usize>() + retired.sum::<usize>()) as u64
    }

    /// Marks the scratch as read by the work queued on `streams` so far.
    pub(crate) fn release(&mut self, ctx: &Arc<Context>, streams: &[Stream]) -> Result<()> {
        self.spare.append(&mut self.last_use);
        for s in streams {
            let ev = match self.spare.pop() {
                Some(ev) => ev,
                None => plain_event(ctx)?,
            };
            s.record(&ev).map_err(cuda_err)?;
            self.last_use.push(ev);
        }
        Ok(())
    }
}
