#include "kiri/config/offload_config.h"

#include <cmath>
#include <string>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/base/units.h"

namespace kiri {

namespace {

constexpr int64_t kPage = 4096;
constexpr int64_t kMaxBlock = int64_t{1} << 30;
constexpr int kStates = 3;  // fp32 master weights, Adam m and v

// The block size in bytes, or a problem (and -1).
int64_t block_or_problem(const OffloadConfig& o, std::vector<std::string>& problems) {
  int64_t b = -1;
  try {
    b = parse_bytes(o.block_size);
  } catch (const Error& e) {
    problems.push_back(str("offload.block_size = '", quote_bounded(o.block_size, 80),
                           "' is not a byte size (e.g. 1MiB, 262144): ", e.message()));
    return -1;
  }
  if (b < kPage || b % kPage != 0 || b > kMaxBlock) {
    problems.push_back(str("offload.block_size = '", quote_bounded(o.block_size, 80), "' is ", b,
                           " bytes: it must be a multiple of 4 KiB (4096 bytes, O_DIRECT's "
                           "alignment) up to 1 GiB"));
    return -1;
  }
  return b;
}

// The I/O keys, which only matter with offload on.
void check_on(const RunConfig& cfg, std::vector<std::string>& problems) {
  const OffloadConfig& o = cfg.offload;
  if (o.path.empty())
    problems.push_back(
        "offload.path is empty: the swap files need a folder (default {run.dir}/offload)");
  if (o.buffer_count < 2)
    problems.push_back(str("offload.buffer_count = ", o.buffer_count,
                           ": at least 2 (one chunk is read while another is written)"));
  if (o.queue_depth < 1)
    problems.push_back(str("offload.queue_depth = ", o.queue_depth, ": at least 1"));
  const int64_t block = block_or_problem(o, problems);
  if (block <= 0) return;
  const int64_t buffer = offload_buffer_bytes(o);
  if (!(o.buffer_mb > 0) || buffer < kStates * block)
    problems.push_back(
        str("offload.buffer_mb = ", o.buffer_mb, " (", format_bytes(buffer),
            ") cannot hold one block of each of the ", kStates, " optimizer states: it needs ",
            kStates, " x offload.block_size = ", kStates, " x ", format_bytes(block), " = ",
            format_bytes(kStates * block), " (", kStates * block / 1048576.0, " MiB) or more"));
}

}  // namespace

void validate_offload(const RunConfig& cfg) {
  const OffloadConfig& o = cfg.offload;
  std::vector<std::string> problems;
  if (o.optimizer == OffloadTier::kNvme || o.parameters == OffloadTier::kNvme ||
      o.gradients == OffloadTier::kNvme)
    check_on(cfg, problems);
  if (problems.empty()) return;
  if (problems.size() == 1) KIRI_RAISE(kConfig, problems.front(), " (docs/offload.md)");
  std::string list;
  for (const std::string& p : problems) list += "\n  - " + p;
  KIRI_RAISE(kConfig, problems.size(),
             " problems with the offload.* keys (docs/offload.md):", list);
}

bool offload_gradients(const OffloadConfig& o) {
  return o.gradients == OffloadTier::kNvme ||
         (o.gradients == OffloadTier::kAuto && o.parameters == OffloadTier::kNvme);
}

int64_t offload_block_bytes(const OffloadConfig& o) {
  std::vector<std::string> problems;
  const int64_t b = block_or_problem(o, problems);
  KIRI_CHECK_KIND(kConfig, problems.empty(), problems.empty() ? "" : problems.front());
  return b;
}

int64_t offload_buffer_bytes(const OffloadConfig& o) {
  if (!(o.buffer_mb > 0)) return 0;
  return static_cast<int64_t>(std::floor(o.buffer_mb * 1048576.0));
}

const char* name(IoEngine e) {
  switch (e) {
    case IoEngine::kAuto:
      return "auto";
    case IoEngine::kIoUring:
      return "io_uring";
    case IoEngine::kThreads:
      return "threads";
  }
  return "?";
}

Offload offload_spec(const OffloadConfig& o) {
  Offload l;
  l.optimizer = o.optimizer;
  l.parameters = o.parameters;
  // auto: nvme with the parameters (ZeRO-Infinity), else none; cpu stays cpu (refused).
  l.gradients = o.gradients == OffloadTier::kCpu ? OffloadTier::kCpu
                : offload_gradients(o)           ? OffloadTier::kNvme
                                                 : OffloadTier::kNone;
  // The swap I/O shape as the trainer reads it (the planner sizes offloaded layouts with it
  // under --auto, offload on or off).
  l.buffer_count = o.buffer_count;
  l.buffer_bytes = offload_buffer_bytes(o);
  l.queue_depth = o.queue_depth;
  try {
    l.block_size = offload_block_bytes(o);
  } catch (const Error&) {
    if (l.any()) throw;
  }
  return l;
}

}  // namespace kiri
