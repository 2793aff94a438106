//! A simulated GPU for the cuda-ipc protocol (tests only, labelled simulation): every rank's
//! queued operations run against a shared memory of flags, receive slots and user buffers,
//! in random orders of the lanes (each lane in order), or with all lanes of a device merged
//! into one queue in the order they were queued (what `CUDA_DEVICE_MAX_CONNECTIONS=1` does to
//! streams). A run must finish (no wait left unsatisfiable) and every result must be exact.

mod captured;
mod cases;
mod device;
mod direct;
mod harness;
mod host_path;
mod mail;
mod staged;
mod traffic;
