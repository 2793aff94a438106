//! The SM-free zero-copy P2P engine (ICCL): user-buffer rendezvous, copy-engine transfers and
//! the registration cache. Grows out of the GPU engine; no code yet.
