#pragma once
// kAuto's 16-bit GEMM path (kernels/ops.h) chosen on a run's own GEMM shapes, the same on
// every rank: a replica computing by the other path would not be bitwise the same.
#include <cstdint>
#include <string>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/config/gpt_config.h"
#include "kiri/kernels/params.h"
#include "kiri/tensor/allocator.h"

namespace kiri::train {

// The 16-bit GEMMs of one micro-batch whose path matters most: forward, dinput and dweight
// of the largest linear (the MLP's first) and of the LM head, as a rank of tensor-parallel
// degree `tp` computes them (tp splits both by columns; sequence parallelism gathers the
// full rows first).
std::vector<kernels::LowpGemmShape> step_gemm_shapes(const GPTConfig& model, int64_t micro_batch,
                                                     int64_t seq_len, int64_t tp);

// One pass over a table's shapes timed as a whole, in FLOP/s: on each path alone (a path
// without a kernel for a shape falls back to via_f32 there), and on the fastest path of each
// shape (what kAuto runs).
struct LowpPassRates {
  double via_f32 = 0, onednn = 0, chosen = 0, packed = 0;
};
LowpPassRates pass_rates(const kernels::LowpGemmRates& rates);

struct GemmLowpChoice {
  std::string note;  // the path; its rates and where they came from (two lines)
  std::string path;  // "onednn", "via_f32" or "packed" (the path of most of the shapes' FLOPs)
  kernels::LowpGemmRates rates;  // what was installed (no shapes when nothing was measured)
};

// Under KIRI_GEMM_LOWP=auto with a oneDNN kernel for `dt` or the packed kernel: rank 0 of
// `group` times the paths on `shapes` (or reads the machine's cache), and every rank
// installs its rates.
// Otherwise nothing is measured and the note says why. Collective over `group` in the
// first case.
GemmLowpChoice choose_gemm_lowp_path(comm::Communicator& group, DType dt,
                                     const std::vector<kernels::LowpGemmShape>& shapes,
                                     Allocator& allocator);

}  // namespace kiri::train
