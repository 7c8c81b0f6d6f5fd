// SPDX-License-Identifier: Apache-2.0
// Fused attention forward for Hopper (sm_90a): TMA loads on mbarrier rings, WGMMA, online
// softmax, producer/consumer warp specialisation with register reallocation, and a TMA-store
// epilogue. Persistent: each CTA claims tiles of kBlockM = 64 * kConsumerWGs query rows of one
// (batch, head) from a global counter and streams the keys in chunks of kBlockN.
//
//   warpgroup 0        producer: one thread claims tiles, issues TMA loads of Q (per tile,
//                      double-buffered where shared memory allows) and K, V (per chunk)
//   warpgroups 1..W    consumers: each owns 64 query rows; per key chunk j
//                        S_j = Q K_j^T (SS-WGMMA) -> mask -> online softmax -> P_j (registers)
//                        O  += P_j V_j (RS-WGMMA), issued before the softmax of chunk j+1 so
//                        the tensor cores run P_j V_j while the SFU computes exp2 of S_{j+1}.
//
// The schedule's parameters are template parameters (FwdConfig), so that napkin's emitter
// can instantiate a derived schedule: head dim, chunk size, consumer warpgroups, stages, mask.
#pragma once

// WGMMA N shapes that are multiples of 8 but not of 16/32/64 (e.g. the 80-key chunks at d = 256).
#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>

#include "napkin/attention_schedule.h"
#include "napkin/device/attention_fusion.h"
#include "napkin/device/fragment.h"
#include "napkin/device/pipeline.h"
#include "napkin/device/staged_inputs.h"
#include "napkin/device/trace.h"

namespace napkin::device {

// The key chunks [begin, end) a tile visits (fwd_chunk_range).
struct ChunkRange {
  int begin, end;
};

template <class Element_, int kTensorHeadDim_, int kBlockN_, int kConsumerWGs_, int kStages_, class Fusion_,
          int kCtasPerSM_ = 1, bool kSkipIdleWarpgroups_ = false, bool kSoftmaxOverlapsPV_ = false,
          bool kQInRegisters_ = false, int kStaggerClocksPerChunk_ = 0, int kTensorHeadDimV_ = kTensorHeadDim_>
struct FwdConfig {
  using Element = Element_;
  // The head dim of Q and K in memory (a multiple of 8: 16-byte rows), and the tiles' own,
  // rounded up to the WGMMA's K step: TMA fills the columns past the tensors' with zeros on load
  // (so they add nothing to Q K^T) and clips them on store.
  static constexpr int kTensorHeadDim = kTensorHeadDim_;
  static constexpr int kHeadDim = (kTensorHeadDim + 15) / 16 * 16;
  static constexpr bool kPaddedHeadDim = kHeadDim != kTensorHeadDim;
  // V's and O's, likewise (P V's columns past the tensors' are 0); apart from Q's where a model
  // says so (DeepSeek's MLA: 192 for Q and K, 128 for V).
  static constexpr int kTensorHeadDimV = kTensorHeadDimV_;
  static constexpr int kHeadDimV = (kTensorHeadDimV + 15) / 16 * 16;
  static constexpr bool kPaddedHeadDimV = kHeadDimV != kTensorHeadDimV;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kConsumerWGs = kConsumerWGs_;
  static constexpr int kBlockM = 64 * kConsumerWGs;
  static constexpr int kStages = kStages_;
  // The diagram's fused code (attention_fusion.h). Tiles are of uneven work when its mask
  // skips blocks (causal and other masks): they keep the late claims that balance them.
  using Fusion = Fusion_;
  // O's element: the operands' (staged in shared memory, stored by TMA), or f32 where the fusion
  // asks (written from the accumulators straight to global memory, as a split's partial rows).
  using OutElement = std::conditional_t<Fusion::kOutputF32, float, Element>;
  static constexpr bool kCausal = Fusion::kSkipsBlocks;
  // A bound that reads tensors (block summaries) may leave hidden chunks between visible ones
  // (a block-sparse mask, padding in runs): a pre-pass lists each tile's visible chunks
  // (fwd_chunk_lists_kernel) and the tile visits those alone.
  static constexpr bool kChunkLists = Fusion::kSkipsBlocks && Fusion::kBlockReadsTensors;
  // Under a mask, the producer evaluates which chunks each warpgroup must mask (Fusion::block)
  // while it waits for a K slot, and hands the flags with the slot: the consumers, whose issue
  // slots the softmax needs, then read one word a chunk. A bound with a floor division cost
  // chunked_local 40 % of its time where each consumer thread evaluated it (bench/NOTES.md).
  static constexpr bool kMaskFlagsFromProducer = Fusion::kMask && Fusion::kBlockCostly;
  // Where such a bound picks each tile's chunks, the whole producer warp searches them (32
  // bounds at once: fwd_chunk_range_by_warp) and its lane 0 loads; elsewhere one elected thread
  // runs alone. (Not for cheap bounds: with the warp in its loop the loading lane spilled, and
  // FlashAttention-3's suite's causal rows lost 2-5 %; bench/NOTES.md.)
  static constexpr bool kWarpSearch = Fusion::kSkipsBlocks && Fusion::kBlockCostly && !kChunkLists;
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  // The order a tile walks its key chunks (fwd_chunk_at_step). Always upwards from key 0, so
  // the tiles of a head, which start together, read each K/V chunk at about the same time,
  // once from DRAM (bench/NOTES.md, v22). The one chunk out of order: non-causal, the last
  // chunk (partial where seqlen_k is not a multiple of kBlockN) goes first; causal, the
  // diagonal chunk stays last. Measured on the H100 (bench/NOTES.md, v23): partial first +1.5 %
  // on d256 non-causal 512, neutral elsewhere; the causal diagonal first -2 to -3 % at d256.
  static constexpr bool kLastChunkFirst = !kCausal;
  // A consumer warpgroup whose rows all lie past seqlen_q (a head's last, partial tile) skips
  // its GEMMs and softmax. The branch costs 2-5 % on every tile where no warpgroup is idle
  // (ptxas schedules the chunk loop differently; bench/NOTES.md, v23), so the host picks this
  // only where the padding is worth more (napkin/attention_schedule.h). Not with O staged in the V
  // ring, whose write waits for every warpgroup (static_assert below).
  static constexpr bool kSkipIdleWarpgroups = kSkipIdleWarpgroups_;
  // The softmax of chunk n runs while the tensor cores compute P V of chunk n - 1, as the source
  // orders it. ptxas schedules within basic blocks and hoists the wait for that P V
  // (wgmma.wait_group 0) to the top of its block, ahead of the softmax, so the overlap is lost
  // unless a block boundary sits between them: with this flag the mbarrier wait for the next
  // P V's V (a branch) is placed there, and the SASS keeps the wait after the last exponential.
  // Measured on the H100 (bench/NOTES.md, v34): d128 with 128-key chunks from 2k keys +0.5 %
  // (non-causal) and +1.5 to +4 % (causal); -1.5 to -2 % on 512-key tiles and short d256
  // causal rows, -2 to -5 % at d64; about even elsewhere. So a schedule asks for it where it pays.
  static constexpr bool kSoftmaxOverlapsPV = kSoftmaxOverlapsPV_;
  // Non-causal tiles are of equal work, so CTAs that start together stay in step, and every
  // CTA reaches a tile boundary (next Q, first K and V, O store) at the same moment. When the
  // tiles do not divide evenly over the grid, the CTAs past the first num_tiles % grid take one
  // tile fewer anyway: they start up to this many SM clocks per key chunk later, spread evenly,
  // which spreads the boundaries over the tile without moving the launch's end (as long as the
  // delay stays under a tile's time). 0: no stagger. Measured on the H100 (bench/NOTES.md, v48):
  // d128 non-causal 512 +2 %, 1k +0.5 %, d256 512-1k +2.5 to +3 %; even at d64 and from 2k.
  static constexpr int kStaggerClocksPerChunk = kStaggerClocksPerChunk_;
  static_assert(kStaggerClocksPerChunk == 0 || !kSkipIdleWarpgroups, "the stagger needs tiles of equal work");
  // CTAs resident per SM (launch bounds, persistent grid). More than one: their warpgroups
  // interleave as the warp schedulers find them ready, instead of taking ping-pong turns.
  static constexpr int kCtasPerSM = kCtasPerSM_;
  // setmaxnreg budgets: the registers a CTA gets at launch (the launch bounds' cap, in steps
  // of 8) are shared out as producer + W * consumer.
  static constexpr int kLaunchRegs = 65536 / (kThreads * kCtasPerSM) / 8 * 8;
  // The producer: 24 for one loading lane; 32 with three consumer warpgroups, or where its warp
  // searches and evaluates a costly bound; 40 there with two consumer warpgroups, which leaves
  // them the 232 that 32 does (ptxas: the producer spilled 272 bytes at 24, 68 at 40).
  static constexpr int kProducerRegs = Fusion::kBlockCostly && kConsumerWGs == 2 ? 40
                                       : kConsumerWGs == 3 || Fusion::kBlockCostly ? 32 : 24;
  static constexpr int kConsumerRegs =
      std::min(240, (kLaunchRegs * (kConsumerWGs + 1) - kProducerRegs) / kConsumerWGs / 8 * 8);
  static_assert((kProducerRegs + kConsumerWGs * kConsumerRegs) * 128 <= 65536 / kCtasPerSM);

  static_assert(kTensorHeadDim % 8 == 0 && kHeadDim <= 256 && kTensorHeadDimV % 8 == 0 && kHeadDimV <= 256);
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256);

  using D = cute::Int<kHeadDim>;
  using DV = cute::Int<kHeadDimV>;
  using N = cute::Int<kBlockN>;
  using S = cute::Int<kStages>;
  // K-major (the head dim is contiguous), swizzled as widely as a tile `kWidth` columns wide
  // allows: 8 rows x 64 elements per atom (128 bytes) where it is a multiple of 64, else 32 (64
  // bytes) or 16 (32). V's MN-major view below is the same swizzle read transposed, a layout
  // WGMMA reads for each.
  template <int kWidth>
  using SmemAtomOf = std::conditional_t<
      kWidth % 64 == 0, decltype(cute::SM90::GMMA::Layout_K_SW128_Atom<Element>{}),
      std::conditional_t<kWidth % 32 == 0, decltype(cute::SM90::GMMA::Layout_K_SW64_Atom<Element>{}),
                         decltype(cute::SM90::GMMA::Layout_K_SW32_Atom<Element>{})>>;
  using SmemLayoutQ = decltype(cute::tile_to_shape(SmemAtomOf<kHeadDim>{}, cute::Shape<cute::_64, D>{}));  // per WG
  using SmemLayoutK = decltype(cute::tile_to_shape(SmemAtomOf<kHeadDim>{}, cute::Shape<N, D, S>{}));
  using SmemLayoutV = decltype(cute::tile_to_shape(SmemAtomOf<kHeadDimV>{}, cute::Shape<N, DV, S>{}));
  using SmemLayoutO = decltype(cute::tile_to_shape(SmemAtomOf<kHeadDimV>{}, cute::Shape<cute::_64, DV>{}));  // per WG
  // V^T (DV x N per stage) is the same memory read MN-major: no data movement.
  using SmemLayoutVt = decltype(cute::composition(
      SmemLayoutV{}, cute::make_layout(cute::Shape<DV, N, S>{},
                                       cute::Stride<N, cute::_1, cute::Int<kBlockN * kHeadDimV>>{})));

  // Q as the A operand of S = Q K^T from registers (loaded once a tile with ldmatrix, its
  // shared-memory buffer freed at once) instead of from shared memory: the S GEMM then reads
  // only K there. Where 64 x 64 tiles run three CTAs per SM, an SS-WGMMA of N = 64 reads 4 KiB
  // of shared memory per 32 tensor-core clocks, the SM's whole shared-memory bandwidth.
  // Measured on the H100 for d64 causal up to 2k (bench/NOTES.md, v37): +1 to +1.5 % at 1k/2k.
  // (The 192-row d64 schedule cannot hold Q too: ptxas spills at 160 registers.)
  static constexpr bool kQInRegisters = kQInRegisters_;
  using MmaQKSS = decltype(cute::make_tiled_mma(
      cute::SM90::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, N, D>>()));
  using MmaQKRS = decltype(cute::make_tiled_mma(
      cute::SM90::GMMA::rs_op_selector<Element, Element, float, cute::Shape<cute::_64, N, D>>()));
  using MmaQK = std::conditional_t<kQInRegisters, MmaQKRS, MmaQKSS>;
  using MmaPV = decltype(cute::make_tiled_mma(
      cute::SM90::GMMA::rs_op_selector<Element, Element, float, cute::Shape<cute::_64, DV, N>,
                                       cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>()));

  // Global tensors as (seq, head_dim, head, batch) with element strides.
  using GmemLayout = cute::Layout<cute::Shape<int32_t, int32_t, int32_t, int32_t>,
                                  cute::Stride<int64_t, cute::_1, int64_t, int64_t>>;
  template <class Ptr>
  static auto gmem_tensor(Ptr p) { return cute::make_tensor(p, GmemLayout{}); }
  using TmaQ = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{},
                                            gmem_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr))),
                                            SmemLayoutQ{}, cute::Shape<cute::_64, D>{}, cute::_1{}));
  using TmaK = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{},
                                            gmem_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr))),
                                            cute::take<0, 2>(SmemLayoutK{}), cute::Shape<N, D>{}, cute::_1{}));
  using TmaV = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{},
                                            gmem_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr))),
                                            cute::take<0, 2>(SmemLayoutV{}), cute::Shape<N, DV>{}, cute::_1{}));
  using TmaO = decltype(cute::make_tma_copy(cute::SM90_TMA_STORE{},
                                            gmem_tensor(cute::make_gmem_ptr(static_cast<Element*>(nullptr))),
                                            SmemLayoutO{}, cute::Shape<cute::_64, DV>{}, cute::_1{}));

  static constexpr int kQTileElems = 64 * kHeadDim;   // a warpgroup's Q
  static constexpr int kOTileElems = 64 * kHeadDimV;  // a warpgroup's O
  static constexpr uint32_t kQBytes = kConsumerWGs * kQTileElems * sizeof(Element);
  static constexpr uint32_t kKBytes = kBlockN * kHeadDim * sizeof(Element);
  static constexpr uint32_t kVBytes = kBlockN * kHeadDimV * sizeof(Element);

  // O is staged in its own buffer when shared memory allows; otherwise (d = 256) at the start
  // of the V ring, which the producer refills for the next tile only once the epilogue's
  // store has read it (o_free). Either way Q is free after the tile's last S GEMM, so the
  // next tile's Q loads while this tile's last P V and epilogue run.
  static constexpr int kQTileBytes = kConsumerWGs * kQTileElems * int(sizeof(Element));
  static constexpr int kOTileBytes = kConsumerWGs * kOTileElems * int(sizeof(Element));
  // Shared memory a CTA may use: the SM's 228 KiB shared by kCtasPerSM CTAs, less the 1 KiB the
  // hardware reserves per CTA.
  static constexpr int kSmemPerCta = 228 * 1024 / kCtasPerSM - 1024;
  static constexpr int kKVRingBytes = (cute::cosize_v<SmemLayoutK> + cute::cosize_v<SmemLayoutV>) * int(sizeof(Element));
  // The fusion's score-shaped inputs staged through shared memory (staged_inputs.h), one tile
  // of 16 rows x kBlockN keys per consumer warp, where they fit beside one Q buffer and the K/V
  // ring (O then in the V ring if need be, except where idle warpgroups skip); read from global
  // memory otherwise (d = 256). They come before a second Q buffer: measured on relative_bias
  // (bench/NOTES.md, 2026-11-26).
  static constexpr int kStagedWarpBytes = 16 * kBlockN * Fusion::kStagedBytes;
  static constexpr bool kStaged = Fusion::kStagedBytes > 0 && kQTileBytes + (kSkipIdleWarpgroups ? kOTileBytes : 0) + kKVRingBytes +
                                                                     4 * kConsumerWGs * kStagedWarpBytes + 1024 <= kSmemPerCta;
  static constexpr int kStagedSmemBytes = kStaged ? 4 * kConsumerWGs * kStagedWarpBytes : 0;
  static constexpr bool kSeparateO = kQTileBytes + kOTileBytes + kKVRingBytes + kStagedSmemBytes + 1024 <= kSmemPerCta;
  static constexpr bool kOInV = !kSeparateO;
  static_assert(kSeparateO || kConsumerWGs * kOTileElems <= cute::cosize_v<SmemLayoutV>,
                "O staging must fit in the V ring");
  static_assert(!(kSkipIdleWarpgroups && kOInV), "idle warpgroups cannot skip where O is staged in the V ring");
  // kOInV with two warpgroups and two V stages: each warpgroup stages its O in a V stage of its
  // own, as soon as its own last P V is done and that stage is free: warpgroup 0 in the stage
  // the tile's last V is not in (free once warpgroup 1's second-to-last P V is done), warpgroup
  // 1 in the last V's stage (free once warpgroup 0's last P V is done). So warpgroup 0 need not
  // wait for warpgroup 1's last P V before its epilogue and next tile (bench/NOTES.md, v24).
  static constexpr bool kOStagedPerWarpgroup =
      kOInV && kConsumerWGs == 2 && kStages == 2 && kOTileElems <= kBlockN * kHeadDimV;
  // The softmax moves a row's running max (and O is rescaled) only when the row's max has grown
  // by more than 2^8 (OnlineSoftmax, fragment.h): where the O rescale (D/2 FMULs a thread a
  // chunk) is large against the chunk's softmax (kBlockN/2 exponentials). Measured on the H100
  // (bench/NOTES.md, v31, v32): d256 (80-key chunks) +3 to +5 %; d128 -1.5 to -4 % and d64 -1 to
  // -4 %, where the warp vote and the branch cost more than the FMULs they save.
  static constexpr bool kConditionalRescale = kHeadDimV >= 2 * kBlockN;
  // Two Q buffers when they fit: the producer loads the next tile's Q a whole tile ahead.
  static constexpr int kQBuffers =
      kSeparateO && 2 * kQTileBytes + kOTileBytes + kKVRingBytes + kStagedSmemBytes + 1024 <= kSmemPerCta ? 2 : 1;
  // The fusion's key-indexed inputs in key rows beside the K ring (staged_inputs.h): 2 x kStages
  // slots of kKeySlotBytes, where they fit in what Q, O, K, V and the staged tiles leave (the
  // barriers and tile indices take under 512 bytes); read from global memory otherwise.
  static constexpr int kKeySlotBytes = kBlockN * Fusion::kKeyRowBytes + 16 * Fusion::kKeyRowInputs;
  static constexpr bool kKeyRows =
      Fusion::kKeyRowInputs > 0 && kQBuffers * kQTileBytes + (kSeparateO ? kOTileBytes : 0) + kKVRingBytes + kStagedSmemBytes +
                                           2 * kStages * kKeySlotBytes + 512 <= kSmemPerCta;
  struct SharedStorage {
    cute::array_aligned<Element, kQBuffers * kConsumerWGs * kQTileElems, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutV>, 1024> v;
    cute::array_aligned<Element, kSeparateO ? kConsumerWGs * kOTileElems : 8, 1024> o;
    cute::array_aligned<char, kStaged ? kStagedSmemBytes : 16, 128> staged;
    cute::array_aligned<char, kKeyRows ? 2 * kStages * kKeySlotBytes : 16, 128> key_rows;
    StageRing<kStages> k_ring;
    StageRing<kStages> v_ring;
    OnceBarrier q_bar[kQBuffers];   // Q of a tile (and its tile_idx) is ready
    uint64_t q_empty[kQBuffers];    // every consumer warp is done with that Q and has read tile_idx
    uint64_t o_free;                // kOInV: the V ring is free of the previous tile's O (see the producer)
    int tile_idx[kQBuffers];        // the tile in that buffer; -1: no more tiles
    ChunkRange tile_range[kQBuffers];  // its key chunks (fwd_chunk_range)
    ChunkRange searched;            // kWarpSearch: the producer warp's search, for its loading lane
    __device__ Element* o_staging() { return kOInV ? v.data() : o.data(); }
    // The key rows of the chunk in K slot `st` (kKeyRows): a slot per K slot and lap.
    __device__ char* key_rows_of(RingState<kStages> st) {
      return key_rows.data() + (st.index + kStages * static_cast<int>(st.phase)) * kKeySlotBytes;
    }
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  // (Otherwise the launch fails at run time with "invalid argument": e.g. three 176-key stages.)
  static_assert(kSmemBytes <= kSmemPerCta, "the schedule's Q, O and K/V stages exceed the shared memory of a CTA");
};

// Persistent dynamic schedule: CTA i starts with tile i, then takes the next unclaimed tile
// from a global counter. Order: (batch, head)-major, query blocks of one (batch, head)
// consecutive and heaviest (largest m_block, for causal) first. CTAs running together then
// share K and V in L2, and the dynamic hand-out balances uneven causal tiles; only the very
// last tiles, the lightest of the last head, form the tail. (A global longest-first order
// across all heads balanced the same but re-read K and V from DRAM once per query block:
// ncu showed 80 % memory throughput at d = 128, causal, s = 512; see bench/NOTES.md.)
// kBatchInner (Fusion::kSharesAcrossBatch): (head, batch)-major instead, so the CTAs running
// together share a tensor that every batch reads (a bias table [h q k]) in L2.
// Split along the keys (FwdParams::num_splits > 1, where a launch has too few tiles to fill the
// GPU: decoding, long keys over few heads): a tile's visible chunks are cut into num_splits
// slices, each its own tile, adjacent in the order; each writes its rows' partial O and LSE,
// and fwd_combine_kernel merges them.
struct TileCoord {
  int m_block, head, batch, split;
};
template <bool kBatchInner>
struct TileScheduler {
  int num_m_blocks, heads, batch, splits;
  __device__ TileCoord decode(int tile) const {
    int split = 0;
    if (splits > 1) {  // (no division by a run-time value on every tile where nothing is split)
      split = tile % splits;
      tile /= splits;
    }
    const int bh = tile / num_m_blocks;
    const int m_idx = tile - bh * num_m_blocks;
    if constexpr (kBatchInner) return {num_m_blocks - 1 - m_idx, bh / batch, bh % batch, split};
    return {num_m_blocks - 1 - m_idx, bh % heads, bh / heads, split};
  }
};

template <class Cfg>
struct FwdParams {
  typename Cfg::TmaQ tma_q;
  typename Cfg::TmaK tma_k;
  typename Cfg::TmaV tma_v;
  typename Cfg::TmaO tma_o;
  float* lse;  // [batch, heads_q, seqlen_q] or null
  typename Cfg::OutElement* o;    // for tiles with every row masked, and f32 O (written directly)
  int64_t o_strides[3];           // batch, seq, head
  int batch, heads_q, heads_kv, group, seqlen_q, seqlen_k, num_m_blocks, num_tiles;
  int kv_batches;                 // batch, or 1 where every batch reads one K and V (batch stride 0)
  int* tile_counter;              // zero at launch, zero again at exit (see the producer)
  float scale_log2;  // softmax_scale * log2(e) (times |Fusion::score_factor| per tile)
  typename Cfg::Fusion::Args fusion;
  bool pingpong;     // consumer warpgroups take turns to issue their WGMMAs
  // Cfg::kChunkLists: tile t's visible chunks, ascending, at chunk_list[t * chunks_per_row],
  // chunk_count[t] of them (t = (batch * heads_q + head) * num_m_blocks + m_block); null where
  // the lists would not fit (fwd_chunk_range's [first, last] range then, the rest masked).
  const uint16_t* chunk_list = nullptr;
  const int* chunk_count = nullptr;
  int chunks_per_row = 0;
  // Split along the keys (TileCoord): num_splits > 1 writes split s's O, normalised by its own
  // sum, at o_partial[((s * batch + b) * heads_q + h) * seqlen_q + q][0, head dim) (f32) and
  // its LSE (-inf where the split sees no key of the row) at lse_partial[same index / head dim].
  int num_splits = 1;
  float* o_partial = nullptr;
  float* lse_partial = nullptr;
};

template <class Cfg>
__device__ __forceinline__ int fwd_tile_index(FwdParams<Cfg> const& p, TileCoord tc) {
  return (tc.batch * p.heads_q + tc.head) * p.num_m_blocks + tc.m_block;
}

// Whether Fusion::block may leave some key of chunks [n0, n1) visible to the rows of tile tc
// (none where n0 >= n1): the bound every search for a tile's chunks evaluates.
template <class Cfg>
__device__ __forceinline__ bool fwd_chunks_may_be_visible(FwdParams<Cfg> const& p, TileCoord tc, int n0, int n1) {
  if (n0 >= n1) return false;
  const int q0 = tc.m_block * Cfg::kBlockM;
  const int q1 = min(q0 + Cfg::kBlockM, p.seqlen_q) - 1;
  const int k1 = min(n1 * Cfg::kBlockN, p.seqlen_k) - 1;
  return Cfg::Fusion::block(p.fusion, tc.batch, tc.head, q0, q1, n0 * Cfg::kBlockN, k1).may;
}

// One warp per tile: the chunks Fusion::block may leave visible over the tile's rows, 32 at a
// time (a ballot), written in ascending order.
template <class Cfg>
__global__ void fwd_chunk_lists_kernel(FwdParams<Cfg> const p, uint16_t* list, int* count) {
  const int tile = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
  if (tile >= p.num_tiles) return;
  const int bh = tile / p.num_m_blocks, m_block = tile - bh * p.num_m_blocks;
  const TileCoord tc{m_block, bh % p.heads_q, bh / p.heads_q, 0};
  int written = 0;
  for (int base = 0; base < p.chunks_per_row; base += 32) {
    const int n = base + lane;
    const bool may = n < p.chunks_per_row && fwd_chunks_may_be_visible(p, tc, n, n + 1);
    const unsigned ballot = __ballot_sync(0xffffffffu, may);
    if (may) list[static_cast<int64_t>(tile) * p.chunks_per_row + written + __popc(ballot & ((1u << lane) - 1))] = static_cast<uint16_t>(n);
    written += __popc(ballot);
  }
  if (lane == 0) count[tile] = written;
}

// The key chunks [begin, end) a tile visits; empty when every row is masked out. Without
// block skipping, every chunk. With it (Fusion::kSkipsBlocks), the first and last chunks the
// mask may leave visible (Fusion::block over the tile's rows), by one thread of the producer:
// ~n/8 + 16 evaluations of a cheap bound a tile (Fusion::kBlockCostly bounds: the warp's search,
// fwd_chunk_range_by_warp).
template <class Cfg>
__device__ __forceinline__ ChunkRange fwd_chunk_range(FwdParams<Cfg> const& p, TileCoord tc) {
  const int n_total = (p.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
  if constexpr (!Cfg::Fusion::kSkipsBlocks) {
    return {0, n_total};
  } else {
    if constexpr (Cfg::kChunkLists)
      if (p.chunk_list != nullptr) return {0, p.chunk_count[fwd_tile_index(p, tc)]};  // steps of the list
    auto may = [&](int n0, int n1) { return fwd_chunks_may_be_visible(p, tc, n0, n1); };
    // In groups of kGroup chunks, then chunk by chunk. (A galloping search, ~2 log2(n) bounds a
    // boundary, made ptxas take the consumers' chunk loop out of uniform registers: causal d = 64
    // and 128 ran 4-8 % more instructions a chunk; bench/NOTES.md, 2026-11-26, fifth.)
    constexpr int kGroup = 8;
    int begin = 0;
    while (begin < n_total && !may(begin, min(begin + kGroup, n_total))) begin += kGroup;
    begin = min(begin, n_total);
    while (begin < n_total && !may(begin, begin + 1)) ++begin;
    if (begin == n_total) return {0, 0};  // every row of the tile masked
    int end = n_total;
    while (end - kGroup >= begin && !may(end - kGroup, end)) end -= kGroup;
    while (end > begin + 1 && !may(end - 1, end)) --end;
    return {begin, end};
  }
}

// Whether the rows of consumer warpgroup w in tile tc need the mask on key chunk n: keys past
// seqlen_k, or Fusion::block cannot show every (row, key) of the block visible.
template <class Cfg>
__device__ __forceinline__ bool fwd_chunk_needs_mask(FwdParams<Cfg> const& p, TileCoord tc, int w, int n) {
  bool m = (n + 1) * Cfg::kBlockN > p.seqlen_k;
  if constexpr (Cfg::Fusion::kMask) {
    const int row0 = tc.m_block * Cfg::kBlockM + 64 * w;
    const int q0 = min(row0, p.seqlen_q - 1), q1 = min(row0 + 63, p.seqlen_q - 1);
    m = m || !Cfg::Fusion::block(p.fusion, tc.batch, tc.head, q0, q1, n * Cfg::kBlockN, (n + 1) * Cfg::kBlockN - 1).must;
  }
  return m;
}

// fwd_chunk_range's result by a whole warp, converged (Cfg::kWarpSearch); every lane gets it.
// The lanes bound 32 runs that split the chunks, then the chunks of the first (for the end, the
// last) run that may be visible, one a lane; where no chunk of it may be (a run's bound is
// looser than its chunks'), the next such run. The result is that of a search chunk by chunk (a
// bound over a run is false only where it is false over each of its chunks), in three rounds
// of one bound each where there are fewer than 1,024 chunks, where one thread evaluates
// ~4 log2(n) bounds in a row.
template <class Cfg>
__device__ __forceinline__ ChunkRange fwd_chunk_range_by_warp(FwdParams<Cfg> const& p, TileCoord tc) {
  const int n_total = (p.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
  const int lane = static_cast<int>(threadIdx.x % 32);
  auto may = [&](int n0, int n1) { return fwd_chunks_may_be_visible(p, tc, n0, n1); };
  const int span = (n_total + 31) / 32;  // chunks a run
  const unsigned runs = __ballot_sync(0xffffffffu, may(min(lane * span, n_total), min((lane + 1) * span, n_total)));
  // The first (from_end: the last) chunk of run r that may be visible; -1 where none.
  auto find_in_run = [&](int r, bool from_end) {
    const int r0 = r * span, r1 = min(r0 + span, n_total);
    for (int base = 0; base < r1 - r0; base += 32) {
      const int n = from_end ? r1 - 1 - base - lane : r0 + base + lane;
      const unsigned hit = __ballot_sync(0xffffffffu, n >= r0 && n < r1 && may(n, n + 1));
      if (hit != 0) return from_end ? r1 - base - __ffs(hit) : r0 + base + __ffs(hit) - 1;
    }
    return -1;
  };
  int begin = -1, last = -1;
  for (unsigned left = runs; left != 0 && begin < 0; left &= left - 1) begin = find_in_run(__ffs(left) - 1, false);
  if (begin < 0) return {0, 0};  // every row of the tile masked
  for (unsigned left = runs; left != 0 && last < 0; left &= ~(1u << (31 - __clz(left))))
    last = find_in_run(31 - __clz(left), true);
  return {begin, last + 1};
}

// Split tc.split's slice of a tile's chunks (its steps, for a chunk list): even slices of the
// visible range; empty where the range has fewer steps than splits.
template <bool kSplit, class Cfg>
__device__ __forceinline__ ChunkRange fwd_split_range(FwdParams<Cfg> const& p, TileCoord tc, ChunkRange range) {
  if constexpr (!kSplit) return range;
  const int per = (range.end - range.begin + p.num_splits - 1) / p.num_splits;
  const int begin = range.begin + tc.split * per, end = min(range.end, begin + per);
  return begin < end ? ChunkRange{begin, end} : ChunkRange{0, 0};
}

// The key chunk a tile visits at step `step` of its n_blocks (Cfg::kLastChunkFirst).
template <class Cfg>
__device__ __forceinline__ int fwd_chunk_at_step(int step, int n_blocks) {
  if constexpr (Cfg::kLastChunkFirst) return step == 0 ? n_blocks - 1 : step - 1;
  return step;
}
// The key chunk of step `step` of a tile whose range fwd_chunk_range gave (from its chunk list
// where there is one).
template <class Cfg>
__device__ __forceinline__ int fwd_chunk_of(FwdParams<Cfg> const& p, TileCoord tc, ChunkRange range, int step) {
  if constexpr (Cfg::kChunkLists)
    if (p.chunk_list != nullptr)
      return p.chunk_list[static_cast<int64_t>(fwd_tile_index(p, tc)) * p.chunks_per_row + range.begin + step];
  return range.begin + fwd_chunk_at_step<Cfg>(step, range.end - range.begin);
}

// One WGMMA batch: c (+)= a * b over the K mode, committed as one group. kARegs: a is a
// register fragment (RS-WGMMA) rather than shared-memory descriptors (SS-WGMMA).
template <bool kZeroInit, bool kARegs, class Mma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma_batch(Mma& mma, TA const& a, TB const& b, TC& c) {
  using namespace cute;
  if constexpr (kARegs) warpgroup_fence_operand(const_cast<TA&>(a));
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = SM90::GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int kb = 0; kb < size<2>(a); ++kb) {
    gemm(mma, a(_, _, kb), b(_, _, kb), c);
    mma.accumulate_ = SM90::GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(c);
  if constexpr (kARegs) warpgroup_fence_operand(const_cast<TA&>(a));
}

// Named barrier of all consumer warpgroups (0 is __syncthreads, 1 + w the epilogue's, 8 + w
// ping-pong's).
constexpr int kConsumersBarrier = 6;
// Cfg::kOStagedPerWarpgroup: warpgroup 1 is done with the V stage warpgroup 0 stages O in (4),
// warpgroup 0 with the stage warpgroup 1 stages O in (5).
constexpr int kOtherVStageFreeBarrier = 4;
constexpr int kLastVStageFreeBarrier = 5;

// Ping-pong between the consumer warpgroups (named barriers 8 + w; 1 + w are the epilogue's):
// a warpgroup waits for its turn before issuing a batch of WGMMAs and hands the turn to the
// next one (round robin) right after issuing, so the tensor cores run one warpgroup's GEMMs
// while the others compute their softmax.
template <int kWGs>
__device__ __forceinline__ void pingpong_wait_turn(bool on, int w) {
  if (on) cutlass::arch::NamedBarrier::sync(256, 8 + w);
}
template <int kWGs>
__device__ __forceinline__ void pingpong_pass_turn(bool on, int w) {
  if (on) cutlass::arch::NamedBarrier::arrive(256, 8 + (w + 1) % kWGs);
}

// kSplit: launched with num_splits > 1 (an instantiation of its own, so that the unsplit kernel
// compiles without the split's branches).
template <class Cfg, bool kSplit>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kCtasPerSM) fmha_fwd_kernel(CUTE_GRID_CONSTANT FwdParams<Cfg> const p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cute;
  using Element = typename Cfg::Element;
  using Fusion = typename Cfg::Fusion;
  using D = typename Cfg::D;
  using DV = typename Cfg::DV;
  using N = typename Cfg::N;
  constexpr int kBlockN = Cfg::kBlockN;
  constexpr int kHeadDim = Cfg::kHeadDim, kHeadDimV = Cfg::kHeadDimV;

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& ss = *reinterpret_cast<typename Cfg::SharedStorage*>(smem_raw);
  // Split: the combine kernel may launch now (programmatic dependent launch); it waits for this
  // grid's completion before it reads (fwd_combine_kernel), so only its launch overlaps.
  if constexpr (kSplit) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int wg = warp / 4;
  const TileScheduler<Fusion::kSharesAcrossBatch> sched{p.num_m_blocks, p.heads_q, p.batch, kSplit ? p.num_splits : 1};

  if (threadIdx.x == 0) {
    // The TMA descriptors (kernel parameters) fetched while the barriers are set up, rather than
    // by each unit's first load or store.
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_o.get_tma_descriptor());
    if (cute::cast_smem_ptr_to_uint(smem_raw) % 1024 != 0) __trap();  // SW128 needs 1 KiB alignment
    for (int b = 0; b < Cfg::kQBuffers; ++b) {
      ss.q_bar[b].init();
      cutlass::arch::ClusterBarrier::init(&ss.q_empty[b], 4 * Cfg::kConsumerWGs);
    }
    ss.k_ring.init(4 * Cfg::kConsumerWGs);  // one arrival per consumer warp frees a slot
    ss.v_ring.init(4 * Cfg::kConsumerWGs);
    cutlass::arch::ClusterBarrier::init(&ss.o_free, Cfg::kConsumerWGs);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------------------------------------------------------- producer warpgroup
    cutlass::arch::warpgroup_reg_dealloc<Cfg::kProducerRegs>();
    // Warp 0 produces: one lane issues the loads; under Cfg::kWarpSearch the whole warp searches
    // each tile's chunks first.
    if (warp == 0 && (Cfg::kWarpSearch || cute::elect_one_sync())) {
      const bool leader = !Cfg::kWarpSearch || lane == 0;
      Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.seqlen_q, kHeadDim, p.heads_q, p.batch));
      Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.seqlen_k, kHeadDim, p.heads_kv, p.kv_batches));
      Tensor mV = p.tma_v.get_tma_tensor(make_shape(p.seqlen_k, kHeadDimV, p.heads_kv, p.kv_batches));
      Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Cfg::SmemLayoutK{});   // (N, D, S)
      Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename Cfg::SmemLayoutV{});   // (N, DV, S)
      auto tma_q = p.tma_q.get_slice(0);
      auto tma_k = p.tma_k.get_slice(0);
      auto tma_v = p.tma_v.get_slice(0);
      RingState<Cfg::kStages> st;
      int q_iter = 0;
      int o_tiles = 0;  // tiles with O to store so far
      // A single Q buffer (d = 256) is refilled only once the previous tile's last S GEMM has
      // read it, shortly before the new Q is needed; and tiles of equal work keep the CTAs in
      // step, so every CTA would read its next Q from DRAM at that same moment. Prefetching it
      // into L2 when the tile is claimed, about two chunks earlier, spreads those reads.
      // (Prefetching K and V too, or ahead in the chunk loop, measured slower: bench/NOTES.md, v21.)
      // Q is read once: first out of L2 (K and V are reread by the head's other tiles).
      constexpr auto kQCacheHint = TMA::CacheHintSm90::EVICT_FIRST;
      // Rows [64 w, 64 w + 64) of tile c's Q: consumer warpgroup w's part.
      auto q_rows_of = [&](TileCoord c, int w) {
        return local_tile(mQ(_, _, c.head, c.batch), Shape<_64, D>{},
                          make_coord(c.m_block * Cfg::kConsumerWGs + w, 0));                 // (64, D)
      };
      auto prefetch_q_to_l2 = [&](int t) {
        const TileCoord c = sched.decode(t);
        CUTE_UNROLL
        for (int w = 0; w < Cfg::kConsumerWGs; ++w) prefetch(p.tma_q, tma_q.partition_S(q_rows_of(c, w)));
      };
      // Claims: every CTA takes tiles until one claim fails, so the counter is bumped exactly
      // num_tiles times; the claim that sees num_tiles - 1 is the launch's last access and
      // resets it, ready for the next launch on the stream (no memset per launch).
      auto claim = [&]() {
        const int old = atomicAdd(p.tile_counter, 1);
        if (old == p.num_tiles - 1) atomicExch(p.tile_counter, 0);
        return old + static_cast<int>(gridDim.x);
      };
      // Non-causal tiles are of equal work, so the next one can be claimed while this one's
      // loads go out rather than after its last V: the claim's round trip (~1,650 clocks at a
      // tile boundary, when every CTA claims at once; bench/NOTES.md, v46) leaves the producer's
      // path to the next Q and K. Measured +0.4 % at d128 non-causal 512 (within the spread),
      // even elsewhere (v47). Causal tiles keep the late claim that balances them, and a single
      // Q buffer's L2 prefetch stays at the claim.
      constexpr bool kClaimAhead = !Cfg::kCausal && Cfg::kQBuffers == 2;
      int next_tile = -1;  // kClaimAhead: claimed while this tile loads
      if constexpr (!Cfg::kCausal && Cfg::kStaggerClocksPerChunk > 0) {
        const int grid = static_cast<int>(gridDim.x), later = p.num_tiles % grid;  // CTAs [later, grid)
        if (p.num_tiles > grid && later != 0 && static_cast<int>(blockIdx.x) >= later) {
          const TileCoord first = sched.decode(0);
          const ChunkRange chunks = fwd_split_range<kSplit>(p, first, fwd_chunk_range<Cfg>(p, first));
          const long long delay = static_cast<long long>(chunks.end - chunks.begin) *
                                  Cfg::kStaggerClocksPerChunk * (static_cast<int>(blockIdx.x) - later + 1) / (grid - later);
          const long long t0 = clock64();
          while (clock64() - t0 < delay) __nanosleep(128);
        }
      }
      // The leader's part of a tile: wait for a Q buffer, publish the tile and its chunks (from
      // ss.searched under kWarpSearch), load; false past the last tile (the consumers are told
      // to stop).
      auto load_tile = [&](int tile) {
        next_tile = -1;
        if constexpr (Cfg::kQBuffers == 1)
          if (tile < p.num_tiles) prefetch_q_to_l2(tile);
        // Q buffer qb and its tile_idx: rewritten once every consumer warp is done with them.
        const int qb = q_iter % Cfg::kQBuffers;
        if (q_iter >= Cfg::kQBuffers)
          cutlass::arch::ClusterBarrier::wait(&ss.q_empty[qb], (q_iter / Cfg::kQBuffers - 1) & 1);
        ++q_iter;
        if (tile >= p.num_tiles) {
          atomicExch(&ss.tile_idx[qb], -1);
          cutlass::arch::ClusterBarrier::arrive(&ss.q_bar[qb].bar);
          return false;
        }
        const TileCoord tc = sched.decode(tile);
        const ChunkRange range = fwd_split_range<kSplit>(p, tc, Cfg::kWarpSearch ? ss.searched : fwd_chunk_range<Cfg>(p, tc));
        const int n_blocks = range.end - range.begin;
        ss.tile_range[qb] = range;  // (read by the consumers after q_bar, as tile_idx)
        atomicExch(&ss.tile_idx[qb], tile);
        if (n_blocks == 0) {
          cutlass::arch::ClusterBarrier::arrive(&ss.q_bar[qb].bar);
          return true;
        }
        ss.q_bar[qb].arrive_expect(Cfg::kQBytes);
        CUTE_UNROLL
        for (int w = 0; w < Cfg::kConsumerWGs; ++w) {
          Tensor gQ = q_rows_of(tc, w);                                                        // (64, D)
          Tensor sQ = make_tensor(make_smem_ptr(ss.q.data() + (qb * Cfg::kConsumerWGs + w) * Cfg::kQTileElems),
                                  typename Cfg::SmemLayoutQ{});                                // (64, D)
          copy(p.tma_q.with(ss.q_bar[qb].bar, 0, kQCacheHint), tma_q.partition_S(gQ), tma_q.partition_D(sQ));
        }
        const int head_kv = tc.head / p.group, batch_kv = p.kv_batches == 1 ? 0 : tc.batch;
        Tensor gK = local_tile(mK(_, _, head_kv, batch_kv), Shape<N, D>{}, make_coord(_, 0));  // (N, D, n)
        Tensor gV = local_tile(mV(_, _, head_kv, batch_kv), Shape<N, DV>{}, make_coord(_, 0));  // (N, DV, n)
        Tensor tKgK = tma_k.partition_S(gK);
        Tensor tKsK = tma_k.partition_D(sK);
        Tensor tVgV = tma_v.partition_S(gV);
        Tensor tVsV = tma_v.partition_D(sV);
        int n_next = fwd_chunk_of<Cfg>(p, tc, range, 0);
        for (int step = 0; step < n_blocks; ++step) {
          const int n = n_next;
          // (Read a step ahead: a chunk list's entry comes from L2 while this step waits for a slot.)
          if (step + 1 < n_blocks) n_next = fwd_chunk_of<Cfg>(p, tc, range, step + 1);
          uint32_t flags = 0;  // kMaskFlagsFromProducer: bit w, warpgroup w masks chunk n
          if constexpr (Cfg::kMaskFlagsFromProducer) {
            CUTE_UNROLL
            for (int w = 0; w < Cfg::kConsumerWGs; ++w) flags |= static_cast<uint32_t>(fwd_chunk_needs_mask<Cfg>(p, tc, w, n)) << w;
          }
          // kKeyRows: the chunk's keys of the key-indexed inputs, copied with its K.
          auto fill_key_rows = [&](uint64_t* full) {
            if constexpr (Cfg::kKeyRows) {
              char* rows = ss.key_rows_of(st);
              Fusion::stage_keys(p.fusion, [&](auto offset, auto ordinal, auto const& view) {
                constexpr int kAt = key_row_offset<kBlockN, decltype(offset)::value, decltype(ordinal)::value>();
                fill_key_row<kBlockN>(view, rows + kAt, tc.batch, tc.head, n * kBlockN, p.seqlen_k, full);
              });
            }
          };
          if constexpr (Cfg::kMaskFlagsFromProducer || Cfg::kKeyRows) ss.k_ring.producer_acquire(st, Cfg::kKBytes, flags, fill_key_rows);
          else ss.k_ring.producer_acquire(st, Cfg::kKBytes);
          copy(p.tma_k.with(ss.k_ring.full_barrier(st)), tKgK(_, _, _, n), tKsK(_, _, _, st.index));
          // kOInV: the previous tile's O, staged in the V ring, must have been stored before
          // this tile's first V overwrites it. o_free completes once per tile that stores O,
          // when every consumer warpgroup's store of it has read shared memory (the epilogue);
          // this waits for the previous such tile, so the parity is exact.
          if (Cfg::kOInV && step == 0 && o_tiles > 0)
            cutlass::arch::ClusterBarrier::wait(&ss.o_free, (o_tiles - 1) & 1);
          ss.v_ring.producer_acquire(st, Cfg::kVBytes);
          copy(p.tma_v.with(ss.v_ring.full_barrier(st)), tVgV(_, _, _, n), tVsV(_, _, _, st.index));
          st.advance();
          if constexpr (kClaimAhead)
            if (step == 0) next_tile = claim();
        }
        ++o_tiles;
        return true;
      };
      for (int tile = blockIdx.x;;) {
        if constexpr (Cfg::kWarpSearch)
          if (tile < p.num_tiles) {
            // (Through shared memory: in registers, the range spilled the loading lane's
            // registers in its chunk loop.)
            const ChunkRange range = fwd_chunk_range_by_warp<Cfg>(p, sched.decode(tile));
            if (leader) ss.searched = range;
          }
        int next = -1;  // the next tile; -1 past the last
        if (leader && load_tile(tile)) next = next_tile >= 0 ? next_tile : claim();
        if constexpr (Cfg::kWarpSearch) next = __shfl_sync(0xffffffffu, next, 0);
        if (next < 0) break;
        tile = next;
      }
    }
  } else {
    // ---------------------------------------------------------------- consumer warpgroups
    cutlass::arch::warpgroup_reg_alloc<Cfg::kConsumerRegs>();
    // Consumer index: rows [64 w, 64 w + 64) of the tile. (Broadcast from lane 0, so that ptxas
    // knows it is warp-uniform: the chunk loop's branches on it, e.g. the O-staging barrier's, then
    // leave the loop in uniform registers; the 176-key loop ran 873 instructions, now 851.)
    const int w = Cfg::kConsumerWGs == 1 ? 0 : __shfl_sync(0xffffffffu, wg - 1, 0);
    const int tid = threadIdx.x % 128;
    const int warp_in_wg = warp % 4;
    char* const staged_tile = ss.staged.data() + (4 * w + warp_in_wg) * Cfg::kStagedWarpBytes;
    FwdTracer trace;  // (nothing unless NAPKIN_FWD_TRACE: trace.h)
    trace.init(tid, w);

    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data() + w * Cfg::kQTileElems),
                            typename Cfg::SmemLayoutQ{});                                  // (64, D) buffer 0
    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Cfg::SmemLayoutK{});     // (N, D, S)
    Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename Cfg::SmemLayoutVt{});   // (DV, N, S)

    typename Cfg::MmaQK mma_qk;
    typename Cfg::MmaPV mma_pv;
    auto thr_qk = mma_qk.get_thread_slice(tid);
    auto thr_pv = mma_pv.get_thread_slice(tid);
    Tensor tSrK = thr_qk.partition_fragment_B(sK);                          // (MMA, 1, D/16, S)
    Tensor tOrV = thr_pv.partition_fragment_B(sVt);                         // (MMA, 1, N/16, S)
    Tensor rS = partition_fragment_C(mma_qk, Shape<_64, N>{});              // ((2,2,N/8), 1, 1) f32
    Tensor rO = partition_fragment_C(mma_pv, Shape<_64, DV>{});             // ((2,2,DV/8), 1, 1) f32
    Tensor rP = make_tensor<Element>(partition_shape_A(mma_pv, Shape<_64, N>{}));  // ((2,2,2), 1, N/16)
    static_assert(decltype(size(rS))::value == decltype(size(rP))::value);
    static_assert(decltype(size(rO))::value == kHeadDimV / 2);

    auto convert_p = [&]() {
      CUTE_UNROLL
      for (int i = 0; i < size(rS); ++i) rP(i) = static_cast<Element>(rS(i));
    };
    auto release = [&](auto& ring, auto st) {
      if (lane == 0) ring.consumer_release(st);
    };
    int qb = 0;  // Q buffer of the current tile
    auto release_q = [&]() {
      __syncwarp();
      if (lane == 0) cutlass::arch::ClusterBarrier::arrive(&ss.q_empty[qb]);
    };

    RingState<Cfg::kStages> k_st, v_st;
    int q_iter = 0;
    const bool pp = Cfg::kConsumerWGs >= 2 && p.pingpong;
    if (w == Cfg::kConsumerWGs - 1) pingpong_pass_turn<Cfg::kConsumerWGs>(pp, w);  // warpgroup 0 goes first
    while (true) {
      qb = q_iter % Cfg::kQBuffers;
      ss.q_bar[qb].wait((q_iter / Cfg::kQBuffers) & 1);
      ++q_iter;
      int tile = 0;
      if (lane == 0) tile = atomicAdd(&ss.tile_idx[qb], 0);
      tile = __shfl_sync(0xffffffffu, tile, 0);
      trace(FwdEvent::kTileStart, w);
      if (tile < 0) break;
      const TileCoord tc = sched.decode(tile);
      // Read from shared memory, then broadcast from lane 0: ptxas then knows the range is
      // warp-uniform, so the chunk loop's WGMMA descriptors and ring indices stay in uniform
      // registers (read as it is, they went through vector registers, R2UR and WARPSYNC).
      const ChunkRange range{__shfl_sync(0xffffffffu, ss.tile_range[qb].begin, 0),
                             __shfl_sync(0xffffffffu, ss.tile_range[qb].end, 0)};
      const int n_blocks = range.end - range.begin;
      const int row0 = tc.m_block * Cfg::kBlockM + 64 * w;   // first query row of this warpgroup
      // kKeyRows: where each key-indexed input's keys start in its key rows, for this tile.
      int key_shift[Fusion::kKeyRowInputs > 0 ? Fusion::kKeyRowInputs : 1] = {};
      if constexpr (Cfg::kKeyRows)
        Fusion::stage_keys(p.fusion, [&](auto, auto ordinal, auto const& view) {
          key_shift[decltype(ordinal)::value] = key_row_shift(view, tc.batch, tc.head);
        });
      // The score's factor (Fusion::kScoreFactor) scales the exponent; where it is negative the
      // scores are negated first (then the running max is of the negated scores). A zero factor
      // keeps a tiny scale so that masked scores (-inf) still give 0, not NaN.
      float scale_log2 = p.scale_log2;
      [[maybe_unused]] bool negate = false;
      if constexpr (Fusion::kScoreFactor) {
        const float factor = Fusion::score_factor(p.fusion, tc.batch, tc.head);
        const float magnitude = fabsf(factor);
        negate = factor < 0.f;
        scale_log2 *= magnitude == 0.f ? 1e-30f : magnitude;
      }

      // Whether chunk n (in K slot k_st, waited for) needs the mask on this warpgroup's rows.
      auto needs_mask = [&](int n) {
        if constexpr (Cfg::kMaskFlagsFromProducer) return ((ss.k_ring.consumer_tag(k_st) >> w) & 1u) != 0;
        else return fwd_chunk_needs_mask<Cfg>(p, tc, w, n);
      };
      // The fused score code over chunk n, in one pass: Fusion::score (or Fusion::prob where P
      // is not normalised), then, where `masked`, the mask: keys past seqlen_k and those
      // Fusion::visible hides go to -inf before a softmax (to 0 where P is not normalised).
      // Rows and keys past the sequence ends are clamped where the fused code reads tensors
      // indexed by them (Fusion::kReadsRowsOrKeys); they are masked or never stored.
      constexpr bool kPerScoreCode = Fusion::kScoreMod || !Fusion::kNormalise;
      constexpr float kMasked = Fusion::kNormalise ? -INFINITY : 0.f;
      // Staged inputs (Cfg::kStaged): this warp's 16 rows of chunk n, copied while earlier
      // chunks are computed; the fused code reads them at `rd`.
      auto stage_chunk = [&](int n) {
        if constexpr (Cfg::kStaged) {
          const int row_first = row0 + 16 * warp_in_wg;
          __syncwarp();  // every lane is done reading the previous chunk
          Fusion::stage(p.fusion, [&](auto offset, auto const& view) {
            stage_input<kBlockN, decltype(offset)::value>(view, staged_tile, lane, tc.batch, tc.head, row_first,
                                                          p.seqlen_q, n * kBlockN, p.seqlen_k);
          });
        }
      };
      // Keys outer, rows inner: what the fused code derives from a key is used by both rows at
      // once, not kept live over the whole chunk (32 registers a value at 128-key chunks). Keys
      // in pairs (the accumulator's adjacent columns), so each staged input is read from shared
      // memory once a pair and a row.
      auto fuse_scores = [&](int n, bool masked, auto negated, const char* key_rows) {
        if constexpr (Cfg::kStaged) staged_wait();
        const int col_base = n * kBlockN;
        CUTE_UNROLL
        for (int jp = 0; jp < kBlockN / 8; ++jp) {
          [[maybe_unused]] StagedPair<kBlockN, Fusion::kStagedBytes> pairs[2];
          if constexpr (Cfg::kStaged) {
            CUTE_UNROLL
            for (int r = 0; r < 2; ++r)
              pairs[r].template load<Fusion>(p.fusion, staged_tile, (lane >> 2) + 8 * r, acc_col(lane, 2 * jp));
          }
          CUTE_UNROLL
          for (int odd = 0; odd < 2; ++odd) {
            const int j = 2 * jp + odd;
            const int col = col_base + acc_col(lane, j);
            const int key = Fusion::kReadsRowsOrKeys ? min(col, p.seqlen_k - 1) : col;
            CUTE_UNROLL
            for (int r = 0; r < 2; ++r) {
              int row = row0 + acc_row(warp_in_wg, lane, r);
              if constexpr (Fusion::kReadsRowsOrKeys) row = min(row, p.seqlen_q - 1);
              auto fuse = [&](auto const& rd) {
                float& s = rS(acc_index(r, j));
                if constexpr (kPerScoreCode) {
                  if constexpr (Fusion::kNormalise) s = Fusion::score(p.fusion, rd, s, tc.batch, tc.head, row, key);
                  else s = Fusion::prob(p.fusion, rd, s, tc.batch, tc.head, row, key);
                }
                if constexpr (decltype(negated)::value) s = -s;
                if (masked) {
                  // (Bitwise: a branch around each visible() would serialise its reads.)
                  bool hidden = col >= p.seqlen_k;
                  if constexpr (Fusion::kMask) hidden = hidden | !Fusion::visible(p.fusion, rd, tc.batch, tc.head, row, key);
                  s = hidden ? kMasked : s;
                }
              };
              // Key-indexed inputs from the chunk's key rows where the kernel has them.
              auto fuse_with_keys = [&](auto const& base) {
                if constexpr (Cfg::kKeyRows) {
                  fuse(KeyRowReads<std::decay_t<decltype(base)>, kBlockN>{base, key_rows, key_shift, acc_col(lane, j)});
                } else {
                  fuse(base);
                }
              };
              if constexpr (Cfg::kStaged) fuse_with_keys(StagedReads<kBlockN, Fusion::kStagedBytes>{{}, pairs[r], odd});
              else fuse_with_keys(DirectReads{});
            }
          }
        }
      };
      // `masked`: needs_mask(n), evaluated before the wait for S_n (its reads of block summaries
      // then overlap the GEMM). Then the staged inputs of the chunk at `next_step` are copied.
      // (Staged inputs are read by score() or prob(), so every chunk's scores are fused.)
      auto modify_scores = [&](int n, bool masked, int next_step, const char* key_rows) {
        auto fuse = [&](auto negated) {
          if (masked) fuse_scores(n, true, negated, key_rows);
          else if (kPerScoreCode || decltype(negated)::value) fuse_scores(n, false, negated, key_rows);
        };
        if constexpr (Fusion::kScoreFactor) {
          if (negate) fuse(std::true_type{});
          else fuse(std::false_type{});
        } else {
          fuse(std::false_type{});
        }
        if constexpr (Cfg::kStaged)
          if (next_step < n_blocks) stage_chunk(fwd_chunk_of<Cfg>(p, tc, range, next_step));
      };

      // An idle warpgroup (Cfg::kSkipIdleWarpgroups) computes nothing: it keeps its place in
      // the ping-pong order (one turn per WGMMA batch of the others) and frees Q and each K/V
      // slot once loaded, as the other warpgroups expect.
      if constexpr (Cfg::kSkipIdleWarpgroups) {
        if (row0 >= p.seqlen_q && n_blocks > 0) {
          release_q();
          auto skip_turn = [&]() {
            pingpong_wait_turn<Cfg::kConsumerWGs>(pp, w);
            pingpong_pass_turn<Cfg::kConsumerWGs>(pp, w);
          };
          ss.k_ring.consumer_wait(k_st);
          skip_turn();
          release(ss.k_ring, k_st);
          k_st.advance();
          for (int i = n_blocks - 2; i >= 0; --i) {
            ss.k_ring.consumer_wait(k_st);
            ss.v_ring.consumer_wait(v_st);
            skip_turn();
            release(ss.k_ring, k_st);
            k_st.advance();
            release(ss.v_ring, v_st);
            v_st.advance();
          }
          ss.v_ring.consumer_wait(v_st);
          skip_turn();
          release(ss.v_ring, v_st);
          v_st.advance();
          continue;
        }
      }

      OnlineSoftmax<kBlockN, Cfg::kConditionalRescale, Fusion::kFiniteFills> softmax;
      softmax.init();
      // The normaliser: the online softmax, or nothing (P = prob(S) already; O is a plain sum).
      auto normalise = [&](float (&corr)[2]) {
        if constexpr (Fusion::kNormalise) {
          return softmax.step(rS, scale_log2, corr);
        } else {
          corr[0] = corr[1] = 1.f;
          return false;
        }
      };
      Tensor sQcur = make_tensor(make_smem_ptr(ss.q.data() + (qb * Cfg::kConsumerWGs + w) * Cfg::kQTileElems),
                                 typename Cfg::SmemLayoutQ{});                             // (64, D)
      Tensor tSrQ = thr_qk.partition_fragment_A(sQcur);                     // (MMA, 1, D/16)
      auto load_q_to_registers = [&]() {
        if constexpr (Cfg::kQInRegisters) {
          auto s2r = make_tiled_copy_A(Copy_Atom<SM75_U32x4_LDSM_N, Element>{}, mma_qk);
          auto thr_s2r = s2r.get_thread_slice(tid);
          copy(s2r, thr_s2r.partition_S(sQcur), thr_s2r.retile_D(tSrQ));
          release_q();
        }
      };
      int last_v_stage = 0;  // the V stage of the tile's last chunk
      // The rows' 1/sum and LSE (the LSE written to global if asked for).
      float inv_sum[2], lse[2];
      // Split along the keys: row `row` of this split's partial rows (FwdParams::o_partial,
      // lse_partial), read where used.
      constexpr auto split_tile = []() { return kSplit; };
      auto partial_row = [&](int row) {
        return ((static_cast<int64_t>(tc.split) * p.batch + tc.batch) * p.heads_q + tc.head) * p.seqlen_q + row;
      };
      auto finish_rows = [&]() {
        if constexpr (!Fusion::kNormalise) {
          inv_sum[0] = inv_sum[1] = 1.f;  // (no LSE: the host refuses an LSE output; partial sums add up)
          return;
        }
        softmax.finish(scale_log2, inv_sum, lse);
        if (split_tile()) {
          if ((lane & 3) == 0) {
            CUTE_UNROLL
            for (int r = 0; r < 2; ++r) {
              const int row = row0 + acc_row(warp_in_wg, lane, r);
              if (row < p.seqlen_q) p.lse_partial[partial_row(row)] = inv_sum[r] > 0.f ? lse[r] : -INFINITY;
            }
          }
        } else if (p.lse != nullptr && (lane & 3) == 0) {
          CUTE_UNROLL
          for (int r = 0; r < 2; ++r) {
            const int row = row0 + acc_row(warp_in_wg, lane, r);
            if (row < p.seqlen_q)
              p.lse[(static_cast<int64_t>(tc.batch) * p.heads_q + tc.head) * p.seqlen_q + row] =
                  inv_sum[r] > 0.f ? lse[r] : Fusion::kEmptyRowLse;
          }
        }
      };
      if (n_blocks > 0) {
        float corr[2];

        // Chunks in the order of fwd_chunk_at_step, as the producer loads them.
        int i = n_blocks - 1;  // chunks left after this one
        load_q_to_registers();
        const int n0 = fwd_chunk_of<Cfg>(p, tc, range, 0);
        stage_chunk(n0);
        ss.k_ring.consumer_wait(k_st);
        trace(FwdEvent::kFirstK, w);
        pingpong_wait_turn<Cfg::kConsumerWGs>(pp, w);
        trace(FwdEvent::kTurn, w);
        wgmma_batch<true, Cfg::kQInRegisters>(mma_qk, tSrQ, tSrK(_, _, _, k_st.index), rS);
        pingpong_pass_turn<Cfg::kConsumerWGs>(pp, w);
        trace(FwdEvent::kIssued, w);
        const bool masked0 = needs_mask(n0);
        warpgroup_wait<0>();
        trace(FwdEvent::kSReady, w);
        const char* key_rows0 = ss.key_rows_of(k_st);
        release(ss.k_ring, k_st);
        k_st.advance();
        if (!Cfg::kQInRegisters && i == 0) release_q();
        modify_scores(n0, masked0, 1, key_rows0);
        normalise(corr);
        convert_p();
        trace(FwdEvent::kSoftmaxDone, w);

        // O (+)= P V of the chunk whose P is in rP. The tile's first P V overwrites O (so O
        // needs no clearing).
        bool first_pv = true;
        auto issue_pv = [&]() {
          if (first_pv) {
            wgmma_batch<true, true>(mma_pv, rP, tOrV(_, _, _, v_st.index), rO);
          } else {
            wgmma_batch<false, true>(mma_pv, rP, tOrV(_, _, _, v_st.index), rO);
          }
          first_pv = false;
        };
        for (--i; i >= 0; --i) {
          const int n = fwd_chunk_of<Cfg>(p, tc, range, n_blocks - 1 - i);
          // Issue S_n = Q K_n^T, then O += P V of the previous step's chunk, as one batch.
          // (ptxas places the softmax of S_n after both complete; ping-pong hides it:
          // docs/runtime.md.)
          ss.k_ring.consumer_wait(k_st);
          ss.v_ring.consumer_wait(v_st);
          pingpong_wait_turn<Cfg::kConsumerWGs>(pp, w);
          trace(FwdEvent::kTurn, w);
          wgmma_batch<true, Cfg::kQInRegisters>(mma_qk, tSrQ, tSrK(_, _, _, k_st.index), rS);
          issue_pv();
          pingpong_pass_turn<Cfg::kConsumerWGs>(pp, w);
          trace(FwdEvent::kIssued, w);
          const bool masked = needs_mask(n);
          warpgroup_wait<1>();
          trace(FwdEvent::kSReady, w);
          const char* key_rows = ss.key_rows_of(k_st);
          release(ss.k_ring, k_st);
          k_st.advance();
          if (!Cfg::kQInRegisters && i == 0) release_q();
          modify_scores(n, masked, n_blocks - i, key_rows);
          const bool rescale = normalise(corr);
          trace(FwdEvent::kSoftmaxDone, w);
          if constexpr (Cfg::kSoftmaxOverlapsPV) {
            RingState<Cfg::kStages> next_v = v_st;  // the next P V's V: this chunk's
            next_v.advance();
            // (warp_uniform: otherwise ptxas took the whole chunk loop out of uniform registers.)
            ss.v_ring.consumer_wait(warp_uniform(next_v));
          }
          warpgroup_wait<0>();
          trace(FwdEvent::kPVDone, w);
          release(ss.v_ring, v_st);
          v_st.advance();
          if constexpr (Cfg::kOStagedPerWarpgroup)
            if (i == 0 && w == 1) cutlass::arch::NamedBarrier::arrive(256, kOtherVStageFreeBarrier);
          if (rescale) scale_rows<kHeadDimV>(rO, corr);
          convert_p();
        }
        ss.v_ring.consumer_wait(v_st);
        pingpong_wait_turn<Cfg::kConsumerWGs>(pp, w);
        trace(FwdEvent::kTurn, w);
        issue_pv();
        pingpong_pass_turn<Cfg::kConsumerWGs>(pp, w);
        trace(FwdEvent::kIssued, w);
        // The rows' sums and LSE need only the softmax state: computed while the last P V runs
        // (the LSE store's branch keeps ptxas from hoisting the wait above them; see
        // kSoftmaxOverlapsPV). Measured +0.5-1.5 % on 512-1k-key rows (bench/NOTES.md, v35).
        finish_rows();
        warpgroup_wait<0>();
        trace(FwdEvent::kPVDone, w);
        release(ss.v_ring, v_st);
        last_v_stage = v_st.index;
        v_st.advance();
        if constexpr (Cfg::kOStagedPerWarpgroup) {
          // (With one chunk the other stage held no V of this tile: warpgroup 1 frees it here.)
          if (w == 0) cutlass::arch::NamedBarrier::arrive(256, kLastVStageFreeBarrier);
          if (w == 1 && n_blocks == 1) cutlass::arch::NamedBarrier::arrive(256, kOtherVStageFreeBarrier);
        }
      }

      // -------------------------------------------------------------- epilogue
      if (n_blocks == 0 && split_tile()) {
        // No key of this split is visible to the rows: a partial of zeros, LSE -inf.
        release_q();
        for (int i = tid; i < 64 * kHeadDimV; i += 128) {
          const int row = row0 + i / kHeadDimV;
          if (row >= p.seqlen_q) continue;
          p.o_partial[partial_row(row) * kHeadDimV + i % kHeadDimV] = 0.f;
          if (Fusion::kNormalise && i % kHeadDimV == 0) p.lse_partial[partial_row(row)] = -INFINITY;
        }
        continue;
      }
      if (n_blocks == 0) {
        finish_rows();  // every row empty: LSE +inf
        release_q();  // (o_free counts only tiles that store O: nothing to signal here)
        // Every row is masked: O = 0 (or the epilogue of 0 with LSE -inf), written straight to
        // global (16 bytes a thread a step), so no shared-memory buffer is touched while the
        // producer may be loading the next Q.
        constexpr int kChunks = Cfg::kTensorHeadDimV / 8;
        for (int i = tid; i < 64 * kChunks; i += 128) {
          const int row = row0 + i / kChunks;
          if (row >= p.seqlen_q) continue;
          using Out = typename Cfg::OutElement;
          Out* dst = p.o + tc.batch * p.o_strides[0] + row * p.o_strides[1] + tc.head * p.o_strides[2] + (i % kChunks) * 8;
          if constexpr (Fusion::kEpilogue) {
            CUTE_UNROLL
            for (int e = 0; e < 8; ++e)
              dst[e] = static_cast<Out>(Fusion::epilogue(p.fusion, 0.f, -INFINITY, tc.batch, tc.head, row, (i % kChunks) * 8 + e));
          } else {
            CUTE_UNROLL
            for (int e = 0; e < int(8 * sizeof(Out)); e += 16) *reinterpret_cast<uint4*>(reinterpret_cast<char*>(dst) + e) = make_uint4(0, 0, 0, 0);
          }
        }
        continue;
      }
      if constexpr (Fusion::kFiniteFills && Fusion::kNormalise) scale_or_clear_rows<kHeadDimV>(rO, inv_sum, softmax.cleared);
      else scale_rows<kHeadDimV>(rO, inv_sum);
      // O in f32 (Fusion::kOutputF32), like a split's partial rows: from the accumulators to global.
      constexpr bool kOutputF32 = Fusion::kOutputF32;
      if constexpr (Fusion::kEpilogue) {
        if (!split_tile()) {
          // The diagram's code after the second contraction, per output element; the row's LSE
          // as the reference defines it (-inf for a row that sees no key). (Split: in the combine.)
          CUTE_UNROLL
          for (int r = 0; r < 2; ++r) {
            const int row = min(row0 + acc_row(warp_in_wg, lane, r), p.seqlen_q - 1);
            const float row_lse = Fusion::kEpilogueUsesLse && inv_sum[r] > 0.f ? lse[r] : -INFINITY;
            CUTE_UNROLL
            for (int j = 0; j < kHeadDimV / 4; ++j) {
              // (A padded column, clipped by the store, reads the last real column's inputs.)
              const int col = Cfg::kPaddedHeadDimV ? min(acc_col(lane, j), Cfg::kTensorHeadDimV - 1) : acc_col(lane, j);
              rO(acc_index(r, j)) = Fusion::epilogue(p.fusion, rO(acc_index(r, j)), row_lse, tc.batch, tc.head, row, col);
            }
          }
        }
      }
      trace(FwdEvent::kStoreStart, w);
      // Stage O (as Element) in shared memory, then one thread stores it with TMA (rows past
      // seqlen_q are clipped by the tensor map). The staging buffer is free once the previous
      // tile's store has read it.
      if (tid == 0) tma_store_wait<0>();
      Element* o_smem = ss.o_staging() + w * Cfg::kOTileElems;
      if constexpr (Cfg::kOStagedPerWarpgroup) o_smem = ss.v.data() + (last_v_stage ^ (w == 0)) * (kBlockN * kHeadDimV);
      Tensor sO = make_tensor(make_smem_ptr(o_smem), typename Cfg::SmemLayoutO{});         // (64, DV)
      if constexpr (Cfg::kOStagedPerWarpgroup) {
        // Only this tile's P Vs can still read the stage: the previous tile's O stores read it
        // before the producer's o_free wait, which came before this tile's V loads.
        cutlass::arch::NamedBarrier::sync(256, w == 0 ? kOtherVStageFreeBarrier : kLastVStageFreeBarrier);
      } else if constexpr (Cfg::kOInV) {
        // The staging tile overlaps V slots that the other warpgroups may still be reading.
        cutlass::arch::NamedBarrier::sync(128 * Cfg::kConsumerWGs, kConsumersBarrier);
      } else {
        cutlass::arch::NamedBarrier::sync(128, 1 + w);
      }
      if (split_tile() || kOutputF32) {
        // The split's O in f32, straight from the accumulator to o_partial (a column pair a store);
        // an f32 O likewise to O, its padded columns dropped.
        CUTE_UNROLL
        for (int r = 0; r < 2; ++r) {
          const int row = row0 + acc_row(warp_in_wg, lane, r);
          if (row >= p.seqlen_q) continue;
          float* dst = split_tile() ? p.o_partial + partial_row(row) * kHeadDimV
                                    : reinterpret_cast<float*>(p.o) + tc.batch * p.o_strides[0] + row * p.o_strides[1] +
                                          tc.head * p.o_strides[2];
          CUTE_UNROLL
          for (int j = 0; j < kHeadDimV / 4; j += 2)
            if (split_tile() || !Cfg::kPaddedHeadDimV || acc_col(lane, j) < Cfg::kTensorHeadDimV)
              *reinterpret_cast<float2*>(dst + acc_col(lane, j)) = make_float2(rO(acc_index(r, j)), rO(acc_index(r, j + 1)));
        }
      } else {
        // O as Element, written with stmatrix (four 8x8 matrices per instruction, shared-memory
        // addressing) into the swizzled staging tile.
        Tensor rOe = make_tensor_like<Element>(rO);
        CUTE_UNROLL
        for (int i = 0; i < size(rO); ++i) rOe(i) = static_cast<Element>(rO(i));
        auto stsm = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_pv);
        auto thr_stsm = stsm.get_thread_slice(tid);
        copy(stsm, thr_stsm.retile_S(rOe), thr_stsm.partition_D(sO));
      }
      tma_store_fence();
      cutlass::arch::NamedBarrier::sync(128, 1 + w);
      if (tid == 0) {
        if (!split_tile() && !kOutputF32) {
          Tensor mO = p.tma_o.get_tma_tensor(make_shape(p.seqlen_q, kHeadDimV, p.heads_q, p.batch));
          Tensor gO = local_tile(mO(_, _, tc.head, tc.batch), Shape<_64, DV>{},
                                 make_coord(tc.m_block * Cfg::kConsumerWGs + w, 0));         // (64, DV)
          auto tma_o = p.tma_o.get_slice(0);
          copy(p.tma_o, tma_o.partition_S(sO), tma_o.partition_D(gO));
          tma_store_arrive();
        }
        trace(FwdEvent::kStoreEnd, w);
        if constexpr (Cfg::kOInV) {
          // The V ring is free of this O once the store has read it: the producer's next V
          // waits for that (o_free), while the next tile's Q and K load meanwhile.
          tma_store_wait<0>();
          cutlass::arch::ClusterBarrier::arrive(&ss.o_free);
        }
      }
    }
    if (tid == 0) tma_store_wait<0>();
  }
#endif
}

// Merges the splits' partial rows (FwdParams::num_splits > 1) into O, with the diagram's code
// after the second contraction, and the LSE where asked: one warp a (batch, head, query) row.
// Under a softmax, split s weighs exp(LSE_s - LSE) with LSE = log sum_s exp(LSE_s); a row no
// split sees is empty (O the epilogue of 0, LSE +inf, as unsplit). Without one, the sums add.
template <class Cfg>
__global__ void fwd_combine_kernel(FwdParams<Cfg> const p) {
  // Launched dependent on the split kernel (fmha_fwd_launch): wait until it has completed and its
  // partial rows are visible.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  using Fusion = typename Cfg::Fusion;
  constexpr int kHeadDimV = Cfg::kHeadDimV, kPerLane = (Cfg::kTensorHeadDimV + 31) / 32;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  // Lane l takes columns l, l + 32, ... of the tensors' head dim (a warp's loads: 128 coalesced bytes).
  auto column = [&](int e) { return e * 32 + lane; };
  auto in_head = [&](int e) { return Cfg::kTensorHeadDimV % 32 == 0 || column(e) < Cfg::kTensorHeadDimV; };
  if (row >= rows) return;
  const int q = static_cast<int>(row % p.seqlen_q);
  const int head = static_cast<int>(row / p.seqlen_q % p.heads_q), batch = static_cast<int>(row / p.seqlen_q / p.heads_q);
  float acc[kPerLane] = {};
  float row_lse = -INFINITY;
  auto add = [&](int s, float weight) {
    const float* src = p.o_partial + (s * rows + row) * kHeadDimV;
    CUTE_UNROLL
    for (int e = 0; e < kPerLane; ++e)
      if (in_head(e)) acc[e] = fmaf(weight, src[column(e)], acc[e]);
  };
  if constexpr (Fusion::kNormalise) {
    float top = -INFINITY;
    for (int s = 0; s < p.num_splits; ++s) top = fmaxf(top, p.lse_partial[s * rows + row]);
    if (top != -INFINITY) {
      float total = 0.f;
      for (int s = 0; s < p.num_splits; ++s) {
        const float weight = __expf(p.lse_partial[s * rows + row] - top);
        if (weight > 0.f) add(s, weight);
        total += weight;
      }
      CUTE_UNROLL
      for (int e = 0; e < kPerLane; ++e) acc[e] /= total;
      row_lse = top + __logf(total);
    }
  } else {
    for (int s = 0; s < p.num_splits; ++s) add(s, 1.f);
  }
  typename Cfg::OutElement* dst = p.o + batch * p.o_strides[0] + q * p.o_strides[1] + head * p.o_strides[2];
  CUTE_UNROLL
  for (int e = 0; e < kPerLane; ++e) {
    if (!in_head(e)) continue;
    float v = acc[e];
    if constexpr (Fusion::kEpilogue)
      v = Fusion::epilogue(p.fusion, v, Fusion::kEpilogueUsesLse ? row_lse : -INFINITY, batch, head, q, column(e));
    dst[column(e)] = static_cast<typename Cfg::OutElement>(v);
  }
  if (Fusion::kNormalise && p.lse != nullptr && lane == 0) p.lse[row] = row_lse == -INFINITY ? Fusion::kEmptyRowLse : row_lse;
}

// The current device's SMs and the CTAs of this kernel resident on each (Cfg::kCtasPerSM, or
// fewer if the occupancy API says so), after allowing the kernel its dynamic shared memory: the
// persistent grid is their product. Both are properties of the kernel and the GPU, so they are
// found on the first launch on each device and kept (a race between threads only repeats the
// same idempotent calls).
template <class Cfg>
cudaError_t fmha_fwd_residency(int* sms, int* ctas_per_sm) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];  // sms * 16 + ctas_per_sm; 0: not found yet
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  if (device < kMaxDevices)
    if (const int k = known[device].load(std::memory_order_acquire); k > 0) {
      *sms = k / 16, *ctas_per_sm = k % 16;
      return cudaSuccess;
    }
  auto kernel = fmha_fwd_kernel<Cfg, false>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(fmha_fwd_kernel<Cfg, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  int num_sms = 0, occupancy = 0;
  if ((err = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return err;
  if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, kernel, Cfg::kThreads, Cfg::kSmemBytes)) != cudaSuccess)
    return err;
  static_assert(Cfg::kCtasPerSM < 16, "(packed in the cache)");
  *sms = num_sms, *ctas_per_sm = std::max(1, std::min(occupancy, Cfg::kCtasPerSM));
  if (device < kMaxDevices) known[device].store(*sms * 16 + *ctas_per_sm, std::memory_order_release);
  return cudaSuccess;
}

// Builds the parameters (TMA descriptors included) and launches. Arguments are checked by
// the caller (attention_fwd_check). `tile_counter`: an int in device memory that is zero and
// used by no launch running concurrently (one per stream); the kernel leaves it zero.
// `softmax_scale` multiplies the scores (Fusion::score's, or the raw ones) in the softmax.
template <class Cfg>
cudaError_t launch_fmha_fwd(const void* q, const void* k, const void* v, void* o, float* lse,
                            int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                            const int64_t (&q_strides)[3], const int64_t (&k_strides)[3],
                            const int64_t (&v_strides)[3], const int64_t (&o_strides)[3],
                            float softmax_scale, bool pingpong, int* tile_counter, cudaStream_t stream,
                            typename Cfg::Fusion::Args const& fusion = {}) {
  using namespace cute;
  using Element = typename Cfg::Element;
  // strides: {batch, seq, head}. A batch stride of 0 (K and V only: one copy for every batch)
  // becomes a batch extent of 1, read at batch 0; TMA takes no zero stride, so the descriptor
  // gets one past the copy's extent.
  const int kv_batches = k_strides[0] == 0 ? 1 : batch;
  auto layout = [&](int seqlen, int head_dim, int heads, const int64_t (&st)[3]) {
    const int64_t past = std::max(st[1] * seqlen, st[2] * heads);
    return typename Cfg::GmemLayout(make_shape(seqlen, head_dim, heads, st[0] == 0 ? 1 : batch),
                                    make_stride(st[1], _1{}, st[2], st[0] == 0 ? past : st[0]));
  };
  FwdParams<Cfg> p;
  p.tma_q = make_tma_copy(SM90_TMA_LOAD{},
                          make_tensor(make_gmem_ptr(static_cast<Element const*>(q)), layout(seqlen_q, Cfg::kTensorHeadDim, heads_q, q_strides)),
                          typename Cfg::SmemLayoutQ{}, Shape<_64, typename Cfg::D>{}, _1{});
  p.tma_k = make_tma_copy(SM90_TMA_LOAD{},
                          make_tensor(make_gmem_ptr(static_cast<Element const*>(k)), layout(seqlen_k, Cfg::kTensorHeadDim, heads_kv, k_strides)),
                          take<0, 2>(typename Cfg::SmemLayoutK{}), Shape<typename Cfg::N, typename Cfg::D>{}, _1{});
  p.tma_v = make_tma_copy(SM90_TMA_LOAD{},
                          make_tensor(make_gmem_ptr(static_cast<Element const*>(v)), layout(seqlen_k, Cfg::kTensorHeadDimV, heads_kv, v_strides)),
                          take<0, 2>(typename Cfg::SmemLayoutV{}), Shape<typename Cfg::N, typename Cfg::DV>{}, _1{});
  // (An f32 O is written without TMA: this descriptor, over the same memory read as Element, is
  // never used then.)
  p.tma_o = make_tma_copy(SM90_TMA_STORE{},
                          make_tensor(make_gmem_ptr(static_cast<Element*>(o)), layout(seqlen_q, Cfg::kTensorHeadDimV, heads_q, o_strides)),
                          typename Cfg::SmemLayoutO{}, Shape<_64, typename Cfg::DV>{}, _1{});
  p.lse = lse;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.kv_batches = kv_batches;
  p.group = heads_q / heads_kv;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.num_m_blocks = (seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  p.num_tiles = p.num_m_blocks * heads_q * batch;
  p.o = static_cast<typename Cfg::OutElement*>(o);
  for (int i = 0; i < 3; ++i) p.o_strides[i] = o_strides[i];
  p.scale_log2 = softmax_scale * 1.4426950408889634f;
  p.fusion = fusion;
  p.pingpong = pingpong;

  int sms = 0, ctas_per_sm = 0;
  if (cudaError_t err = fmha_fwd_residency<Cfg>(&sms, &ctas_per_sm); err != cudaSuccess) return err;
  const int resident_ctas = sms * ctas_per_sm;
  p.tile_counter = tile_counter;
  // Chunk lists (Cfg::kChunkLists): stream-ordered memory, listed by a pre-pass and freed after
  // the kernel; past 256 MB (or 65,536 chunks a row) the kernel takes ranges instead.
  void* lists = nullptr;
  if constexpr (Cfg::kChunkLists) {
    p.chunks_per_row = (seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
    const size_t list_bytes = static_cast<size_t>(p.num_tiles) * p.chunks_per_row * sizeof(uint16_t);
    const size_t count_offset = (list_bytes + 3) / 4 * 4;
    const size_t bytes = count_offset + static_cast<size_t>(p.num_tiles) * sizeof(int);
    if (p.chunks_per_row <= 65536 && bytes <= (size_t{256} << 20)) {
      if (cudaError_t err = cudaMallocAsync(&lists, bytes, stream); err != cudaSuccess) return err;
      uint16_t* list = static_cast<uint16_t*>(lists);
      int* count = reinterpret_cast<int*>(static_cast<char*>(lists) + count_offset);
      constexpr int kWarpsPerCta = 8;
      fwd_chunk_lists_kernel<Cfg><<<(p.num_tiles + kWarpsPerCta - 1) / kWarpsPerCta, 32 * kWarpsPerCta, 0, stream>>>(p, list, count);
      p.chunk_list = list;
      p.chunk_count = count;
    }
  }
  // Split along the keys where the tiles are too few (fwd_launch_splits): the partial rows in
  // stream-ordered memory, merged by fwd_combine_kernel, freed after it.
  const int chunks = (seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
  p.num_splits = napkin::detail::fwd_launch_splits(p.num_tiles, sms, chunks);
  void* partial = nullptr;
  const int64_t rows = static_cast<int64_t>(batch) * heads_q * seqlen_q;
  if (p.num_splits > 1) {
    const size_t bytes = static_cast<size_t>(p.num_splits) * rows * (Cfg::kHeadDimV + 1) * sizeof(float);
    if (cudaError_t err = cudaMallocAsync(&partial, bytes, stream); err != cudaSuccess) {
      if (lists != nullptr) cudaFreeAsync(lists, stream);
      return err;
    }
    p.o_partial = static_cast<float*>(partial);
    p.lse_partial = p.o_partial + static_cast<int64_t>(p.num_splits) * rows * Cfg::kHeadDimV;
    p.num_tiles *= p.num_splits;
  }
  dim3 grid(std::min(p.num_tiles, resident_ctas));
  if (p.num_splits > 1) fmha_fwd_kernel<Cfg, true><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  else fmha_fwd_kernel<Cfg, false><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (p.num_splits > 1 && err == cudaSuccess) {
    // A programmatic dependent launch: the combine's launch overlaps the split kernel's tail (a
    // few us of a decoding step), its griddepcontrol.wait keeping the order.
    constexpr int kRowsPerCta = 8;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>((rows + kRowsPerCta - 1) / kRowsPerCta));
    config.blockDim = dim3(32 * kRowsPerCta);
    config.stream = stream;
    cudaLaunchAttribute dependent[1];
    dependent[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    dependent[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = dependent;
    config.numAttrs = 1;
    err = cudaLaunchKernelEx(&config, fwd_combine_kernel<Cfg>, p);
  }
  for (void* buffer : {lists, partial})
    if (buffer != nullptr) {
      const cudaError_t freed = cudaFreeAsync(buffer, stream);
      if (err == cudaSuccess) err = freed;
    }
  return err;
}

}  // namespace napkin::device
