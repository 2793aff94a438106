//! The libccl communicator.
