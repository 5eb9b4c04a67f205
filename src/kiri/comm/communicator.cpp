#include "kiri/comm/communicator.h"

#include "kiri/base/error.h"

namespace kiri::comm {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kBarrier:
      return "barrier";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

Range chunk_range(int64_t total, int parts, int index) {
  KIRI_CHECK(total >= 0 && parts >= 1 && 0 <= index && index < parts, "chunk ", index, " of ",
             parts, " over ", total, " elements");
  const int64_t base = total / parts, extra = total % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return Range{begin, begin + base + (index < extra ? 1 : 0)};
}

}  // namespace kiri::comm
