//! Integration tests live in `tests/tests/`; this crate only hosts them.
