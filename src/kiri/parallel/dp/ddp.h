#pragma once
// Data parallelism (DDP): every rank of the dp group holds the whole model
// and reads different data; gradients are summed over the group before the
// same optimizer step runs everywhere.
//
// Gradients live in one flat buffer (ParameterStore). They are grouped into
// buckets of about `bucket_bytes`, walking the parameters in reverse order
// (the order backward produces them); each bucket is a contiguous range of
// the flat buffer, all-reduced in place. As backward reports parameters
// ready (on_grads_ready), every bucket whose parameters are all ready starts
// its all-reduce asynchronously, and outstanding ones are polled (MPI only
// progresses when polled), so communication overlaps the rest of backward.
// finalize_grads() waits for them, once, before the optimizer step.
//
// Gradient accumulation: only the backward of the last micro-batch syncs
// (set_sync(false) before the others); gradients accumulate in fp32 in the
// flat buffer meanwhile. The model scales its loss by 1 / (tokens in the
// global batch), so the SUM over ranks is the gradient of the global mean.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/nn/parameter_store.h"

namespace kiri::parallel {

struct DdpOptions {
  int64_t bucket_bytes = int64_t{25} << 20;
};

// Rows to add into a parameter's gradient on every rank (an embedding's
// gradient is sparse: a few rows per token). finalize_grads() all-gathers
// them over the group and adds every rank's rows, in rank order, so each
// rank ends with the same sum without reducing the whole V x C matrix.
struct SparseRowGrad {
  nn::Parameter* param = nullptr;
  Tensor indices;  // [M] I32 rows of param
  Tensor rows;     // [M, C] F32
};

struct Bucket {
  int64_t offset = 0;  // in elements of the flat gradient buffer
  int64_t numel = 0;
  std::vector<nn::Parameter*> params;
  int pending = 0;  // parameters not yet ready this backward
  comm::WorkHandle work;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::ParameterStore& store, comm::Communicator& group,
                          const DdpOptions& options, Allocator& allocator);

  // Copies rank 0's parameters to every rank of the group.
  void broadcast_parameters();
  // Whether the coming backward ends the accumulation (and so syncs).
  void set_sync(bool sync);
  // Backward's hook: these parameters have their final gradient.
  void on_grads_ready(const std::vector<nn::Parameter*>& params);
  // Waits for (and, where backward did not report them, starts) every
  // bucket, then adds the gathered sparse rows. After it, every rank holds
  // the gradient summed over the group.
  void finalize_grads(const std::vector<SparseRowGrad>& sparse = {});

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void start(Bucket& b);

  nn::ParameterStore& store_;
  comm::Communicator& group_;
  Allocator& allocator_;  // gather buffers (category buffers)
  std::unordered_map<const nn::Parameter*, int> index_of_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // parameter index in store -> bucket
  bool sync_ = true;
};

}  // namespace kiri::parallel
