//! Integration tests live in `tests/tests/`; `src/bin/ccl-testrank.rs` is the per-rank driver
//! they launch as separate processes.
