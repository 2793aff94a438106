//! Fault tolerance (ICCL-style, generalised): per-path health state machines, primary/backup
//! choice and breakpoint agreement, all sans-IO. No code yet.
