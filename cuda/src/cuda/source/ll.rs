//! The low-latency kernels over the ranks' low-latency areas: the areas' layout, the flag and
//! acknowledgement protocol, the exchange, the all-reduce, and the point-to-point kernel.

use std::fmt::Write as _;

/// Threads per block of a low-latency kernel.
pub const LL_THREADS: u32 = 512;

/// Most blocks of a low-latency kernel (the block indices the areas' words are laid out for);
/// each block owns a contiguous part of the message and its own flag and acknowledgement
/// words, so blocks never wait for each other.
pub const LL_MAX_BLOCKS: usize = 128;

/// Blocks of a low-latency kernel unless `CCL_IPC_LL_BLOCK_BYTES` sizes the grid.
pub const LL_DEFAULT_BLOCKS: usize = 32;

/// Slots per (sender, receiver) pair of the point-to-point region: a sender runs at most this
/// many small sends ahead of its receiver's receives.
pub const LL_P2P_SLOTS: usize = 8;

/// Largest send or receive the point-to-point kernel carries (one slot); which sends take the
/// kernel is the agreed `CCL_IPC_P2P_KERNEL_BYTES`, at most this. The slots take `ranks x 8 x
/// 512 KiB` of every rank's area (4 MiB with two ranks, 32 MiB with eight) while the default
/// limit uses an eighth of each: sized for `MODE=p2pbig` of `docs/device-runs/next/next_x2.sh`
/// to find the crossover, then to shrink to it.
pub const LL_P2P_BYTES: usize = 256 << 10;

/// Blocks per side of a point-to-point launch (that many send blocks, then that many receive
/// blocks): every send and receive is cut into that many runs of lines, one per block. Fixed,
/// so a sender knows how many of its receiver's blocks return credits whatever the receiver
/// launched; at most 16 (the words of a credit or ticket line).
pub const LL_P2P_BLOCKS: usize = 8;
const _: () = assert!(
    LL_P2P_BLOCKS <= 16,
    "a credit or ticket line holds 16 words"
);

/// Most sends, and most receives, one point-to-point kernel launch carries (its parameter).
pub const LL_P2P_MAX_OPS: usize = 32;

/// Bytes of one slot: a send goes in packed lines (a header line holding the byte count,
/// then 8 payload bytes a line, each line carrying the send's sequence number twice), which
/// the receiver takes as they land, with no fence and no flag between data and reader; in
/// whole 256 bytes. Slots are written only as lines, so a stale line carries an older number.
pub const LL_P2P_PACK_SLOT: usize = (16 + 2 * LL_P2P_BYTES).next_multiple_of(256);

/// Byte offset of the point-to-point region in a low-latency area: after a flag word per
/// (sender, block) and an acknowledgement word per (peer, block), each on its own 64-byte
/// line. The region is fixed-size, so every rank finds it at the same offset whatever its
/// `ll_max`.
pub fn ll_p2p_offset(nranks: usize) -> usize {
    (2 * nranks * LL_MAX_BLOCKS * 64).div_ceil(256) * 256
}

/// Bytes of the point-to-point region's words, from [`ll_p2p_offset`]: a line per (sender,
/// slot) holding the number of the slot's last receive (what an abort moves on), a credit line
/// per receiver (a word per receive block: the last sequence number that block consumed from
/// this rank), and this rank's ticket line (a word per send block: how many of its sends that
/// block has read, for in-place receives).
pub fn ll_p2p_words_bytes(nranks: usize) -> usize {
    (64 * (nranks * LL_P2P_SLOTS + nranks + 1)).div_ceil(256) * 256
}

/// Bytes at the start of a low-latency area holding every word a low-latency kernel of this
/// rank spins on (flags, acknowledgements, the point-to-point slot, credit and ticket lines),
/// cyclically `>=`: moving each a quarter of the u32 circle ahead ends every such spin, which
/// is how an abort releases kernels left waiting on a dead peer.
pub fn ll_spin_words_bytes(nranks: usize) -> usize {
    ll_p2p_offset(nranks) + ll_p2p_words_bytes(nranks)
}

/// Byte offset of the point-to-point slots in a low-latency area: after the words, a slot of
/// [`LL_P2P_PACK_SLOT`] bytes per (sender, slot). Zeroed at setup with the words.
pub fn ll_p2p_pack_offset(nranks: usize) -> usize {
    ll_p2p_offset(nranks) + ll_p2p_words_bytes(nranks)
}

/// Byte offset of this rank's operation numbers in its low-latency area: a 32-bit word per
/// block index, the number of the last low-latency operation this rank ran, after the
/// point-to-point region (its words and slots). The kernels count on from
/// it themselves, so a launch captured into a CUDA graph takes the next number at every
/// replay.
pub fn ll_seq_offset(nranks: usize) -> usize {
    ll_p2p_pack_offset(nranks) + nranks * LL_P2P_SLOTS * LL_P2P_PACK_SLOT
}

/// Most payload bytes per peer an operation in packed lines carries (the packed buffers'
/// size: two lines' bytes per payload byte).
pub const LL_PACK_MAX: usize = 256 << 10;

/// Byte offset of the packed buffers in a low-latency area: after the operation numbers
/// ([`ll_seq_offset`]); per sender, two buffers (by operation parity) of `2 * LL_PACK_MAX`
/// bytes of lines. They start zeroed with the words (a line is read by the number in it).
pub fn ll_pack_offset(nranks: usize) -> usize {
    ll_seq_offset(nranks) + 256
}

/// Byte offset of the data regions in a low-latency area: after the packed buffers. What
/// comes before it is zeroed at setup.
pub fn ll_data_offset(nranks: usize) -> usize {
    ll_pack_offset(nranks) + nranks * 2 * 2 * LL_PACK_MAX
}

/// Bytes of one rank's low-latency area: the words, the packed buffers, then two buffers (by
/// operation parity) of `ll_max` bytes per sender.
pub fn ll_area_bytes(nranks: usize, ll_max: usize) -> usize {
    ll_data_offset(nranks) + nranks * 2 * ll_max
}

/// Most ranks a low-latency exchange serves (its transfer table is a kernel parameter).
pub const LL_EXCHANGE_MAX_RANKS: usize = 8;

/// Packed lines, shared by the low-latency kernels and the point-to-point kernel: 16 bytes
/// carry 8 payload bytes and a sequence number twice, so a reader needs no flag.
fn ll_pack_code(out: &mut String) {
    out.push_str(
        r#"
/* Packed lines (operations of at most the packed limit per peer): 16 bytes carry 8 payload
   bytes, each 4-byte half followed by the operation's sequence number, written by one 16-byte
   store of which each 8-byte half lands whole. A reader knows a line is complete when both
   numbers match, so the writer needs no fence and no flag: one NVLink crossing instead of
   data, fence, flag. Packed buffers and slots are used only this way, so a stale line
   carries an older number. */
static __device__ inline u64 ccl_pk_gather(const u8* p, u64 avail) {
  if (avail >= 8 && (((u64)p) & 7) == 0) return *(const u64*)p;
  u64 v = 0;
  for (u32 k = 0; k < 8 && k < avail; ++k) v |= (u64)p[k] << (8 * k);
  return v;
}

static __device__ inline void ccl_pk_scatter(u8* p, u64 v, u64 avail) {
  if (avail >= 8 && (((u64)p) & 7) == 0) { *(u64*)p = v; return; }
  for (u32 k = 0; k < 8 && k < avail; ++k) p[k] = (u8)(v >> (8 * k));
}

static __device__ inline void ccl_pk_put(u8* line, u64 v, u32 seq) {
  u32 w[4] = { (u32)v, seq, (u32)(v >> 32), seq };
  ccl_st16_volatile(line, w);
}

/* Waits for a packed line of operation `seq`. `ack` is a word of this rank's area that an
   abort moves a quarter of the u32 circle on (otherwise never more than a few operations from
   `seq`: a peer's acknowledgement, a slot's last number): then it gives up, and what it
   returns is garbage. */
static __device__ inline u64 ccl_pk_take(const u8* line, u32 seq, const volatile u32* ack) {
  u32 w[4];
  for (u32 n = 1;; ++n) {
    ccl_ld16_fresh(line, w);
    if (w[1] == seq && w[3] == seq) break;
    if ((n & 1023u) == 0 && (int)(*ack - seq) > (1 << 29)) break;
    ccl_spin();
  }
  return (u64)w[0] | ((u64)w[2] << 32);
}

"#,
    );
}

/// The flag, acknowledgement and buffer discipline both low-latency kernels share. The words
/// are laid out for [`LL_MAX_BLOCKS`] block indices; a communicator uses the first `nidx` of
/// them (its largest grid, in the kernels' `opts`) and every operation moves each of those on
/// (a kernel waits for the acknowledgements of every index two operations back, whatever its
/// own grid): a grid of `G` blocks (at most `nidx`, the same on every rank for a given
/// operation) has block `blk` raise the flags and acknowledgements of indices `blk`,
/// `blk + G`, ... Block `blk` owns bytes `[b0, b1)` of each message, a multiple of 16 bytes
/// so vector copies and element boundaries line up.
fn ll_protocol_code(out: &mut String) {
    ll_pack_code(out);
    let _ = write!(
        out,
        r#"
#define LL_MAXB {LL_MAX_BLOCKS}

static __device__ inline void ccl_ll_range(u64 bytes, u32 blk, u64* b0, u64* b1) {{
  u64 per = (bytes + gridDim.x - 1) / gridDim.x;
  per = (per + 15) & ~15ull;
  *b0 = (u64)blk * per < bytes ? (u64)blk * per : bytes;
  *b1 = *b0 + per < bytes ? *b0 + per : bytes;
}}

/* Copies bytes [b0, b1) of `from` to the same offsets of `to`, 16 bytes at a time when both
   are aligned, four loads in flight per thread before their stores (one at a time, a thread
   waits out a memory latency per 16 bytes). */
static __device__ inline void ccl_ll_copy(u8* to, const u8* from, u64 b0, u64 b1, u32 tid, u32 nthreads) {{
  if (((((u64)to) | ((u64)from)) & 15) == 0) {{
    const u64 v0 = b0 / 16, v1 = b1 / 16;
    for (u64 i = v0 + tid; i < v1; i += 4ull * nthreads) {{
      ccl_u4 a[4];
#pragma unroll
      for (u32 k = 0; k < 4; ++k) if (i + k * nthreads < v1) a[k] = ((const ccl_u4*)from)[i + k * nthreads];
#pragma unroll
      for (u32 k = 0; k < 4; ++k) if (i + k * nthreads < v1) ((ccl_u4*)to)[i + k * nthreads] = a[k];
    }}
    for (u64 i = v1 * 16 + tid; i < b1; i += nthreads) to[i] = from[i];
  }} else {{
    for (u64 i = b0 + tid; i < b1; i += nthreads) to[i] = from[i];
  }}
}}

/* Before overwriting a peer's buffers (parity of seq): wait until every block of every peer
   acknowledged the operation two back, which used the same buffers. Every block, not just
   this one: a block's part of a message depends on the message's size, and a packed
   operation waits for no flag, so nothing else says the peer has left that operation. */
static __device__ inline void ccl_ll_wait_acks(u8* mine, u32 nranks, u32 rank, u32 seq, u32 blk, u32 tid, u32 nidx) {{
  for (u32 w = tid; w < nranks * LL_MAXB; w += blockDim.x) {{
    if (w / LL_MAXB == rank || w % LL_MAXB >= nidx) continue;
    volatile u32* ack = (volatile u32*)(mine + 64ull * ((u64)nranks * LL_MAXB + w));
    while ((int)(*ack - (seq - 2u)) < 0) ccl_spin();
  }}
  __syncthreads();
}}

/* After this block's pushes: make them visible, raise its flag at every peer, wait for every
   peer's flag of the same block here. */
static __device__ inline void ccl_ll_signal_and_wait(const u64* areas, u8* mine, u32 nranks, u32 rank, u32 seq, u32 blk, u32 tid, u32 nidx) {{
  __threadfence_system();
  __syncthreads();
  if (tid < nranks && tid != rank) {{
    for (u32 i = blk; i < nidx; i += gridDim.x) *(volatile u32*)((u8*)areas[tid] + 64ull * ((u64)rank * LL_MAXB + i)) = seq;
    volatile u32* flag = (volatile u32*)(mine + 64ull * ((u64)tid * LL_MAXB + blk));
    while ((int)(*flag - seq) < 0) ccl_spin();
  }}
  __syncthreads();
  __threadfence();
}}

/* Lines [l0, l1) of `lines` that block `blk` owns. */
static __device__ inline void ccl_pk_range(u64 lines, u32 blk, u64* l0, u64* l1) {{
  const u64 per = (lines + gridDim.x - 1) / gridDim.x;
  *l0 = (u64)blk * per < lines ? (u64)blk * per : lines;
  *l1 = *l0 + per < lines ? *l0 + per : lines;
}}

/* Where rank `from`'s packed lines of parity `par` sit in an area. */
static __device__ inline u8* ccl_pk_slot(u8* area, u64 pk_off, u64 pk_max, u32 from, u32 par) {{
  return area + pk_off + ((u64)from * 2 + par) * 2 * pk_max;
}}

/* A packed operation raises no flag anyone waits for, but still moves this block's flag at
   every peer on, so a flag never falls behind the sequence by half the u32 circle (a later
   flagged operation compares cyclically). */
static __device__ inline void ccl_pk_flag(const u64* areas, u32 nranks, u32 rank, u32 seq, u32 blk, u32 tid, u32 nidx) {{
  if (tid < nranks && tid != rank)
    for (u32 i = blk; i < nidx; i += gridDim.x) *(volatile u32*)((u8*)areas[tid] + 64ull * ((u64)rank * LL_MAXB + i)) = seq;
}}

/* This block's operation number: one more than the last operation's (every index's word
   holds it: the block covering an index writes it at the end, see ccl_ll_ack). */
static __device__ inline u32 ccl_ll_seq(const u32* seqs) {{
  return *(const volatile u32*)&seqs[blockIdx.x] + 1u;
}}

/* After this block has read what the peers pushed: tell them their buffer is free, and
   record the operation's number for the indices this block covers (every thread read the
   number before the barrier). Every value read was consumed before the barrier, so the
   reads are complete; the system fence before the acknowledgement is kept unless `opts` has
   CCL_LL_ACK_UNFENCED. */
#define CCL_LL_ACK_UNFENCED 1u
/* The block indices a communicator's operations use (its largest grid), in `opts` above
   bit 8: every operation moves exactly these on, so the words of the others never matter. */
static __device__ inline u32 ccl_ll_nidx(u32 opts) {{ return opts >> 8; }}
static __device__ inline void ccl_ll_ack(const u64* areas, u32 nranks, u32 rank, u32 seq, u32 blk, u32 tid, u32 opts, u32* seqs) {{
  __syncthreads();
  if (tid == 0)
    for (u32 i = blk; i < ccl_ll_nidx(opts); i += gridDim.x) seqs[i] = seq;
  if (tid < nranks && tid != rank) {{
    if (!(opts & CCL_LL_ACK_UNFENCED)) __threadfence_system();
    for (u32 i = blk; i < ccl_ll_nidx(opts); i += gridDim.x)
      *(volatile u32*)((u8*)areas[tid] + 64ull * ((u64)nranks * LL_MAXB + (u64)rank * LL_MAXB + i)) = seq;
  }}
}}
"#
    );
}

/// The low-latency exchange: per peer `q`, push `sbytes[q]` from `src[q]` into `q`'s area and
/// copy the `rbytes[q]` that `q` pushed here to `dst[q]`; `q == rank` is a local copy. Same
/// flag, acknowledgement and buffer discipline as the all-reduce (every block of every rank
/// signals every peer each time, data or not), so the two kernels share one sequence.
pub(super) fn ll_exchange_code(name: &str, out: &mut String) {
    ll_protocol_code(out);
    let _ = write!(
        out,
        r#"
#define LL_MAXR {LL_EXCHANGE_MAX_RANKS}
struct ccl_xfer {{ u64 src[LL_MAXR]; u64 dst[LL_MAXR]; u64 sbytes[LL_MAXR]; u64 rbytes[LL_MAXR]; }};

static __device__ inline void ccl_copy_part(u8* to, const u8* from, u64 bytes, u32 blk, u32 tid, u32 nthreads) {{
  u64 b0, b1;
  ccl_ll_range(bytes, blk, &b0, &b1);
  ccl_ll_copy(to, from, b0, b1, tid, nthreads);
}}

/* The exchange in packed lines: pushes, then each peer's lines as they arrive. */
static __device__ inline void ccl_pk_exchange(const ccl_xfer& x, const u64* areas, u32 nranks, u32 rank, u32 seq, u64 pk_off, u64 pk_max, u32 nidx) {{
  const u32 par = seq & 1u, blk = blockIdx.x, tid = threadIdx.x;
  u8* mine = (u8*)areas[rank];
  for (u32 q = 0; q < nranks; ++q) {{
    if (q == rank) {{
      if (x.src[q] != x.dst[q]) ccl_copy_part((u8*)x.dst[q], (const u8*)x.src[q], x.sbytes[q], blk, tid, blockDim.x);
      continue;
    }}
    u8* to = ccl_pk_slot((u8*)areas[q], pk_off, pk_max, rank, par);
    const u8* from = (const u8*)x.src[q];
    u64 l0, l1;
    ccl_pk_range((x.sbytes[q] + 7) / 8, blk, &l0, &l1);
    for (u64 i = l0 + tid; i < l1; i += blockDim.x) ccl_pk_put(to + 16 * i, ccl_pk_gather(from + 8 * i, x.sbytes[q] - 8 * i), seq);
  }}
  ccl_pk_flag(areas, nranks, rank, seq, blk, tid, nidx);
  __syncthreads();
  for (u32 q = 0; q < nranks; ++q) {{
    if (q == rank || x.rbytes[q] == 0) continue;
    const u8* from = ccl_pk_slot(mine, pk_off, pk_max, q, par);
    const volatile u32* ack = (const volatile u32*)(mine + 64ull * ((u64)nranks * LL_MAXB + (u64)q * LL_MAXB + blk));
    u64 l0, l1;
    ccl_pk_range((x.rbytes[q] + 7) / 8, blk, &l0, &l1);
    for (u64 i = l0 + tid; i < l1; i += blockDim.x) ccl_pk_scatter((u8*)x.dst[q] + 8 * i, ccl_pk_take(from + 16 * i, seq, ack), x.rbytes[q] - 8 * i);
  }}
}}

extern "C" __global__ void {name}(ccl_xfer x, const u64* areas, u32 nranks, u32 rank, u32* seqs, u64 llmax, u64 data_off, u64 pk_off, u64 pk_max, u32 packed, u32 opts) {{
  const u32 seq = ccl_ll_seq(seqs);
  const u32 par = seq & 1u;
  const u32 blk = blockIdx.x;
  const u32 tid = threadIdx.x;
  u8* mine = (u8*)areas[rank];
  ccl_ll_wait_acks(mine, nranks, rank, seq, blk, tid, ccl_ll_nidx(opts));
  if (packed) {{
    ccl_pk_exchange(x, areas, nranks, rank, seq, pk_off, pk_max, ccl_ll_nidx(opts));
    ccl_ll_ack(areas, nranks, rank, seq, blk, tid, opts, seqs);
    return;
  }}
  for (u32 q = 0; q < nranks; ++q) {{
    if (q == rank) {{
      if (x.src[q] != x.dst[q]) ccl_copy_part((u8*)x.dst[q], (const u8*)x.src[q], x.sbytes[q], blk, tid, blockDim.x);
    }} else if (x.sbytes[q] > 0) {{
      u8* to = (u8*)areas[q] + data_off + ((u64)rank * 2 + par) * llmax;
      ccl_copy_part(to, (const u8*)x.src[q], x.sbytes[q], blk, tid, blockDim.x);
    }}
  }}
  ccl_ll_signal_and_wait(areas, mine, nranks, rank, seq, blk, tid, ccl_ll_nidx(opts));
  for (u32 q = 0; q < nranks; ++q) {{
    if (q == rank || x.rbytes[q] == 0) continue;
    const u8* from = mine + data_off + ((u64)q * 2 + par) * llmax;
    ccl_copy_part((u8*)x.dst[q], from, x.rbytes[q], blk, tid, blockDim.x);
  }}
  ccl_ll_ack(areas, nranks, rank, seq, blk, tid, opts, seqs);
}}
"#
    );
}

/// `root` of the low-latency all-reduce kernel when every rank gets the result.
pub const LL_EVERY_RANK: u32 = u32::MAX;

/// The low-latency all-reduce (and reduce-scatter: peer `q` gets the input at
/// `q * push_stride`, this rank's own part is at `own_off`; both 0 for all-reduce): each block
/// pushes its part of the input into every peer's area with plain stores, fences, raises its
/// flag there, waits for the same block's flag of every peer in its own area, and reduces all
/// inputs in rank order (so every rank computes the same bits); see [`ll_protocol_code`].
/// With `root` other than [`LL_EVERY_RANK`], a reduce: only `root` gets pushes and reduces,
/// while flags and acknowledgements still go between every pair (the protocol's invariant).
pub(super) fn ll_body_code(name: &str, out: &mut String) {
    ll_protocol_code(out);
    let _ = write!(
        out,
        r#"
static __device__ inline T ccl_ld_volatile(const T* p) {{ return *(const volatile T*)p; }}
#define CCL_LL_EVERY_RANK {LL_EVERY_RANK}u

union ccl_pk_elems {{ u64 u; T t[8 / sizeof(T)]; }};
union ccl_v16 {{ u32 w[4]; T t[16 / sizeof(T)]; }};

/* Rank q's part of a flagged operation: this rank's input, or what q pushed into this area. */
static __device__ inline const u8* ccl_ll_input(const T* own, const u8* data, u32 q, u32 rank, u32 par, u64 llmax) {{
  return q == rank ? (const u8*)own : data + ((u64)q * 2 + par) * llmax;
}}

/* Reads 16 bytes of rank q's part (what a peer pushed is read past L1). */
static __device__ inline void ccl_ll_ld(const u8* from, u32 q, u32 rank, u32* w) {{
  if (q == rank) ccl_ld16(from, w);
  else ccl_ld16_fresh(from, w);
}}

/* The flagged reduction of bytes [b0, b1) of every rank's part into dst, in rank order (the
   same bits on every rank): 16 bytes at a time when dst and the input are aligned, two vectors
   per thread at once so their loads overlap; the rest element by element. */
static __device__ inline void ccl_ll_reduce_part(T* dst, const T* own, const u8* data, u32 par, u64 llmax, u32 nranks, u32 rank, u64 b0, u64 b1, const P p) {{
  const u32 tid = threadIdx.x, nt = blockDim.x;
  u64 head = b0;
  if (((((u64)dst) | ((u64)own)) & 15) == 0) {{
    const u64 v0 = b0 / 16, v1 = b1 / 16;
    for (u64 v = v0 + tid; v < v1; v += 2ull * nt) {{
      const bool two = v + nt < v1;
      ccl_v16 acc[2], x[2];
      for (u32 q = 0; q < nranks; ++q) {{
        const u8* from = ccl_ll_input(own, data, q, rank, par, llmax);
        ccl_ll_ld(from + 16 * v, q, rank, x[0].w);
        if (two) ccl_ll_ld(from + 16 * (v + nt), q, rank, x[1].w);
        for (u32 j = 0; j < 2; ++j) {{
          if (q == 0) acc[j] = x[j];
          else for (u32 k = 0; k < 16 / sizeof(T); ++k) acc[j].t[k] = ccl_apply(acc[j].t[k], x[j].t[k], p);
        }}
      }}
      ccl_st16((u8*)dst + 16 * v, acc[0].w);
      if (two) ccl_st16((u8*)dst + 16 * (v + nt), acc[1].w);
    }}
    head = v1 * 16 > b0 ? v1 * 16 : b0;
  }}
  for (u64 i = head / sizeof(T) + tid; i < b1 / sizeof(T); i += nt) {{
    T acc = rank == 0 ? own[i] : ccl_ld_volatile((const T*)ccl_ll_input(own, data, 0, rank, par, llmax) + i);
    for (u32 q = 1; q < nranks; ++q) {{
      const T x = q == rank ? own[i] : ccl_ld_volatile((const T*)ccl_ll_input(own, data, q, rank, par, llmax) + i);
      acc = ccl_apply(acc, x, p);
    }}
    dst[i] = acc;
  }}
}}

/* The reduction in packed lines: pushes, then per line the inputs in rank order as they
   arrive (the same order, so the same bits, as the flagged kernel). */
static __device__ inline void ccl_pk_reduce(T* dst, const T* src, u64 n, const u64* areas, u32 nranks, u32 rank, u32 seq, u64 push_stride, u64 own_off, u32 root, u64 pk_off, u64 pk_max, u32 nidx) {{
  const P p = ccl_param(0);
  const u32 par = seq & 1u, blk = blockIdx.x, tid = threadIdx.x;
  u8* mine = (u8*)areas[rank];
  const u64 bytes = n * sizeof(T);
  u64 l0, l1;
  ccl_pk_range((bytes + 7) / 8, blk, &l0, &l1);
  for (u32 q = 0; q < nranks; ++q) {{
    if (q == rank || (root != CCL_LL_EVERY_RANK && q != root)) continue;
    u8* to = ccl_pk_slot((u8*)areas[q], pk_off, pk_max, rank, par);
    const u8* from = (const u8*)src + (u64)q * push_stride;
    for (u64 i = l0 + tid; i < l1; i += blockDim.x) ccl_pk_put(to + 16 * i, ccl_pk_gather(from + 8 * i, bytes - 8 * i), seq);
  }}
  ccl_pk_flag(areas, nranks, rank, seq, blk, tid, nidx);
  if (root != CCL_LL_EVERY_RANK && root != rank) return;
  const u8* own = (const u8*)src + own_off;
  for (u64 i = l0 + tid; i < l1; i += blockDim.x) {{
    ccl_pk_elems acc, x;
    for (u32 q = 0; q < nranks; ++q) {{
      const volatile u32* ack = (const volatile u32*)(mine + 64ull * ((u64)nranks * LL_MAXB + (u64)q * LL_MAXB + blk));
      x.u = q == rank ? ccl_pk_gather(own + 8 * i, bytes - 8 * i) : ccl_pk_take(ccl_pk_slot(mine, pk_off, pk_max, q, par) + 16 * i, seq, ack);
      if (q == 0) acc = x;
      else for (u32 k = 0; k < 8 / sizeof(T); ++k) acc.t[k] = ccl_apply(acc.t[k], x.t[k], p);
    }}
    ccl_pk_scatter((u8*)dst + 8 * i, acc.u, bytes - 8 * i);
  }}
}}

extern "C" __global__ void {name}(T* dst, const T* src, u64 n, const u64* areas, u32 nranks, u32 rank, u32* seqs, u64 llmax, u64 data_off, u64 push_stride, u64 own_off, u32 root, u64 pk_off, u64 pk_max, u32 packed, u32 opts) {{
  const u32 seq = ccl_ll_seq(seqs);
  const P p = ccl_param(0);
  const u32 par = seq & 1u;
  const u32 blk = blockIdx.x;
  const u32 tid = threadIdx.x;
  u64 b0, b1;
  ccl_ll_range(n * sizeof(T), blk, &b0, &b1);
  u8* mine = (u8*)areas[rank];
  ccl_ll_wait_acks(mine, nranks, rank, seq, blk, tid, ccl_ll_nidx(opts));
  if (packed) {{
    ccl_pk_reduce(dst, src, n, areas, nranks, rank, seq, push_stride, own_off, root, pk_off, pk_max, ccl_ll_nidx(opts));
    ccl_ll_ack(areas, nranks, rank, seq, blk, tid, opts, seqs);
    return;
  }}
  const T* own = (const T*)((const u8*)src + own_off);
  for (u32 q = 0; q < nranks; ++q) {{
    if (q == rank || (root != CCL_LL_EVERY_RANK && q != root)) continue;
    u8* to = (u8*)areas[q] + data_off + ((u64)rank * 2 + par) * llmax;
    ccl_ll_copy(to, (const u8*)src + (u64)q * push_stride, b0, b1, tid, blockDim.x);
  }}
  ccl_ll_signal_and_wait(areas, mine, nranks, rank, seq, blk, tid, ccl_ll_nidx(opts));
  if (root == CCL_LL_EVERY_RANK || root == rank) ccl_ll_reduce_part(dst, own, mine + data_off, par, llmax, nranks, rank, b0, b1, p);
  ccl_ll_ack(areas, nranks, rank, seq, blk, tid, opts, seqs);
}}
"#
    );
}

/// The point-to-point kernel: [`LL_P2P_BLOCKS`] send blocks run the sends in order and as many
/// receive blocks the receives, side by side so that neither side waits behind the other (a
/// send waits only for credits, which the peer's receive blocks return whatever its send
/// blocks are doing). Every block takes its run of each message's lines. A send waits until
/// every receive block consumed its slot's previous use, writes the slot's header line (send
/// block 0: the byte count) and its run of payload lines, and moves its block's ticket word.
/// A receive waits for the header (and, where its buffer overlaps sends of the same launch,
/// for every send block's ticket of the last of them: an in-place exchange reads before it
/// writes), takes its run of lines as they land, marks the slot's line with its number unless
/// an abort moved it past (the line tracks the slot's last use, which is what an abort moves
/// on) and returns its block's credit. Bytes received are the sender's count clipped to the
/// receive; a receive whose size differs from its send's also writes 1 + the sender's rank
/// to `err` (host-mapped memory the host reports from) if nothing is there yet. Numbers
/// compare cyclically; a stale line could pass for a current one only if written exactly
/// 2^32 sends of the pair before it.
pub(super) fn ll_p2p_code(name: &str, out: &mut String) {
    ll_pack_code(out);
    let _ = write!(
        out,
        r#"
#define P2P_SLOTS {LL_P2P_SLOTS}u
#define P2P_OPS {LL_P2P_MAX_OPS}
#define P2P_G {LL_P2P_BLOCKS}u
#define P2P_SLOT_BYTES {LL_P2P_PACK_SLOT}ull
struct ccl_p2p {{
  u64 src[P2P_OPS]; u64 sbytes[P2P_OPS]; u64 dst[P2P_OPS]; u64 rbytes[P2P_OPS];
  u32 speer[P2P_OPS]; u32 sseq[P2P_OPS]; u32 rpeer[P2P_OPS]; u32 rseq[P2P_OPS]; u32 rafter[P2P_OPS];
  u32 nsend; u32 nrecv;
}};

/* Thread 0: waits until each of the P2P_G words at `w` is at least `value` (cyclically). */
static __device__ inline void ccl_p2p_spin_all(const volatile u32* w, u32 value) {{
  for (u32 b = 0; b < P2P_G; ++b)
    while ((int)(w[b] - value) < 0) ccl_backoff();
}}

/* Where the point-to-point region (`off`) of `area` keeps sender `q`'s slot `slot` (its
   line word and its lines), the credit line of peer `q`, and the ticket line. */
static __device__ inline volatile u32* ccl_p2p_line(u8* area, u64 off, u32 q, u32 slot) {{
  return (volatile u32*)(area + off + 64ull * ((u64)q * P2P_SLOTS + slot));
}}
static __device__ inline u8* ccl_p2p_slot(u8* area, u64 off, u32 nranks, u32 q, u32 slot) {{
  const u64 words = (64ull * (nranks * P2P_SLOTS + nranks + 1) + 255) / 256 * 256;
  return area + off + words + ((u64)q * P2P_SLOTS + slot) * P2P_SLOT_BYTES;
}}
static __device__ inline volatile u32* ccl_p2p_credits(u8* area, u64 off, u32 nranks, u32 q) {{
  return (volatile u32*)(area + off + 64ull * ((u64)nranks * P2P_SLOTS + q));
}}

/* Lines [l0, l1) of `lines` that block `b` of a side takes. */
static __device__ inline void ccl_p2p_run(u64 lines, u32 b, u64* l0, u64* l1) {{
  const u64 per = (lines + P2P_G - 1) / P2P_G;
  *l0 = (u64)b * per < lines ? (u64)b * per : lines;
  *l1 = *l0 + per < lines ? *l0 + per : lines;
}}

static __device__ inline void ccl_p2p_send(u8* to, const u8* src, u64 bytes, u32 seq, u32 b) {{
  if (b == 0 && threadIdx.x == 0) ccl_pk_put(to, bytes, seq);
  u64 l0, l1;
  ccl_p2p_run((bytes + 7) / 8, b, &l0, &l1);
  for (u64 i = l0 + threadIdx.x; i < l1; i += blockDim.x) ccl_pk_put(to + 16 * (i + 1), ccl_pk_gather(src + 8 * i, bytes - 8 * i), seq);
}}

/* Thread 0: waits for the header of the slot's send number `seq`; its byte count, or garbage
   once an abort moved the slot's line far on. */
static __device__ inline u32 ccl_p2p_arrival(const u8* slot, const volatile u32* line, u32 seq) {{
  u32 w[4];
  for (;;) {{
    ccl_ld16_fresh(slot, w);
    if (w[1] == seq && w[3] == seq) return w[0];
    if ((int)(*line - seq) > (1 << 29)) return w[0];
    ccl_backoff();
  }}
}}

extern "C" __global__ void {name}(ccl_p2p x, const u64* areas, u32 rank, u32 nranks, u64 off, u32 ticket_base, u32* err) {{
  u8* mine = (u8*)areas[rank];
  volatile u32* tickets = (volatile u32*)(mine + off + 64ull * (nranks * P2P_SLOTS + nranks));
  const u32 b = blockIdx.x % P2P_G;
  __shared__ u32 got;
  if (blockIdx.x < P2P_G) {{
    for (u32 i = 0; i < x.nsend; ++i) {{
      const u32 q = x.speer[i], seq = x.sseq[i];
      if (threadIdx.x == 0) ccl_p2p_spin_all(ccl_p2p_credits(mine, off, nranks, q), seq - P2P_SLOTS);
      __syncthreads();
      ccl_p2p_send(ccl_p2p_slot((u8*)areas[q], off, nranks, rank, seq % P2P_SLOTS), (const u8*)x.src[i], x.sbytes[i], seq, b);
      __syncthreads();
      if (threadIdx.x == 0) tickets[b] = ticket_base + i + 1;
    }}
  }} else {{
    for (u32 j = 0; j < x.nrecv; ++j) {{
      const u32 q = x.rpeer[j], seq = x.rseq[j];
      volatile u32* line = ccl_p2p_line(mine, off, q, seq % P2P_SLOTS);
      const u8* slot = ccl_p2p_slot(mine, off, nranks, q, seq % P2P_SLOTS);
      if (threadIdx.x == 0) {{
        got = ccl_p2p_arrival(slot, line, seq);
        if (x.rafter[j] > 0) ccl_p2p_spin_all(tickets, ticket_base + x.rafter[j]);
      }}
      __syncthreads();
      const u64 n = (u64)got < x.rbytes[j] ? (u64)got : x.rbytes[j];
      if (b == 0 && threadIdx.x == 0 && (u64)got != x.rbytes[j] && *(volatile u32*)err == 0) *(volatile u32*)err = q + 1;
      u64 l0, l1;
      ccl_p2p_run((n + 7) / 8, b, &l0, &l1);
      for (u64 i = l0 + threadIdx.x; i < l1; i += blockDim.x) ccl_pk_scatter((u8*)x.dst[j] + 8 * i, ccl_pk_take(slot + 16 * (i + 1), seq, line), n - 8 * i);
      __syncthreads();
      if (threadIdx.x == 0) {{
        /* Forward only, and by one block: an abort that moved the line on while this receive
           waited must stay moved, or a later receive on the slot would wait for good. */
        if (b == 0 && (int)(*line - seq) < 0) *line = seq;
        __threadfence_system();
        ccl_p2p_credits((u8*)areas[q], off, nranks, rank)[b] = seq;
      }}
    }}
  }}
}}
"#
    );
}
