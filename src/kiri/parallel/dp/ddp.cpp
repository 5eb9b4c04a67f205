#include "kiri/parallel/dp/ddp.h"

#include "kiri/kernels/ops.h"

namespace kiri::parallel {

DistributedDataParallel::DistributedDataParallel(nn::ParameterStore& store,
                                                 comm::Communicator& group,
                                                 const DdpOptions& options, Allocator& allocator)
    : store_(store), group_(group), allocator_(allocator) {
  KIRI_CHECK(
      store.dtype() == DType::kF32 || store.dtype() == DType::kBF16 || store.dtype() == DType::kF16,
      "DDP reduces F32, BF16 or F16 gradients, got ", dtype_name(store.dtype()));
  const auto& params = store.parameters();
  const int64_t elem = static_cast<int64_t>(dtype_size(store.dtype()));
  bucket_of_.assign(params.size(), -1);
  // Walk the parameters backwards: each bucket is a contiguous range ending
  // where the previous one began.
  for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
    nn::Parameter* p = params[i];
    if (buckets_.empty() || (buckets_.back().numel + p->numel()) * elem > options.bucket_bytes)
      buckets_.push_back(Bucket{p->offset + p->numel(), 0, {}, 0, nullptr});
    Bucket& b = buckets_.back();
    b.offset = p->offset;
    b.numel += p->numel();
    b.params.push_back(p);
    bucket_of_[i] = static_cast<int>(buckets_.size()) - 1;
    index_of_[p] = i;
  }
  for (Bucket& b : buckets_) b.pending = static_cast<int>(b.params.size());
}

void DistributedDataParallel::broadcast_parameters() {
  group_.broadcast(store_.values(), 0);
}

void DistributedDataParallel::set_sync(bool sync) {
  sync_ = sync;
}

void DistributedDataParallel::start(Bucket& b) {
  Tensor range = store_.grads().flat_range(b.offset, b.numel);
  b.work = group_.all_reduce_async(range, comm::ReduceOp::kSum);
}

void DistributedDataParallel::on_grads_ready(const std::vector<nn::Parameter*>& params) {
  if (!sync_) return;
  for (nn::Parameter* p : params) {
    auto it = index_of_.find(p);
    KIRI_CHECK(it != index_of_.end(), "DDP: parameter ", p->name, " is not in the store");
    Bucket& b = buckets_[bucket_of_[it->second]];
    KIRI_CHECK(b.pending > 0, "DDP: ", p->name, " reported ready twice in one backward");
    if (--b.pending == 0) start(b);
  }
  group_.progress();
}

void DistributedDataParallel::finalize_grads(const std::vector<SparseRowGrad>& sparse) {
  if (!sync_) return;
  for (Bucket& b : buckets_)
    if (!b.work) start(b);  // backward did not report all of its parameters
  // The sparse rows travel while the last buckets finish.
  struct Gather {
    Tensor indices, rows;  // [M * n] I32, [M * n, C]
    comm::WorkHandle w1, w2;
  };
  std::vector<Gather> gathers;
  const int n = group_.size();
  for (const SparseRowGrad& s : sparse) {
    const int64_t m = s.indices.numel();
    KIRI_CHECK(s.rows.rank() == 2 && s.rows.dim(0) == m, "DDP: sparse rows ", s.rows.shape().str(),
               " do not match ", m, " indices");
    const int64_t c = s.rows.dim(1);
    Gather g;
    g.indices = Tensor::empty({m * n}, DType::kI32, Category::kBuffers, allocator_);
    g.rows = Tensor::empty({m * n, c}, DType::kF32, Category::kBuffers, allocator_);
    Tensor flat_rows = g.rows.view({m * n * c});
    g.w1 = group_.all_gather_async(s.indices.view({m}), g.indices);
    g.w2 = group_.all_gather_async(s.rows.view({m * c}), flat_rows);
    gathers.push_back(std::move(g));
  }
  for (Bucket& b : buckets_) {
    b.work->wait();
    b.work.reset();
    b.pending = static_cast<int>(b.params.size());
  }
  for (size_t i = 0; i < sparse.size(); ++i) {
    gathers[i].w1->wait();
    gathers[i].w2->wait();
    // Every rank adds all ranks' rows in rank order: the same sum everywhere.
    kernels::token_embedding_backward<float>(sparse[i].param->grad, gathers[i].rows,
                                             gathers[i].indices);
  }
}

}  // namespace kiri::parallel
