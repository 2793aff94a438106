//! The NCCL C ABI: `libnccl.so.2`.
