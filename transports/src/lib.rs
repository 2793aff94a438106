//! Transports between ranks: `shm` (host shared memory between ranks of one host), `socket`
//! (TCP between hosts) and, growing in `mpt`, the multipath engine.
