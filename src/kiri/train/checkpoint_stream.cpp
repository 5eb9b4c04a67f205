#include "kiri/train/checkpoint_stream.h"

#include <algorithm>
#include <cmath>

#include "kiri/base/units.h"

namespace kiri::train {

int64_t checkpoint_piece_elements(const CheckpointConfig& cfg) {
  const int64_t bytes = parse_bytes(cfg.piece_size);
  KIRI_CHECK_KIND(kConfig, bytes >= 4096, "checkpoint.piece_size must be at least 4KiB, got '",
                  cfg.piece_size, "' (", bytes, " bytes)");
  return bytes / 4;
}

void for_each_piece(int64_t total, int64_t piece, const std::function<void(int64_t, int64_t)>& fn) {
  for (int64_t b = 0; b < total; b += piece) fn(b, std::min(piece, total - b));
}

std::vector<GlobalPiece> global_pieces(const nn::ParameterSegment& s) {
  std::vector<GlobalPiece> out;
  for (const nn::ElementRun& r : nn::element_runs(*s.param)) {
    const int64_t lo = std::max(r.local, s.begin);
    const int64_t hi = std::min(r.local + r.length, s.begin + s.numel());
    if (lo < hi)
      out.push_back({r.global + (lo - r.local), hi - lo, s.state_offset + (lo - s.begin)});
  }
  return out;
}

void check_finite_piece(const Tensor& t, const std::string& what, int64_t first, int64_t total) {
  KIRI_CHECK_KIND(kCheckpoint, t.dtype() == DType::kF32, what, " is ", dtype_name(t.dtype()),
                  ", expected F32");
  const float* x = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      KIRI_RAISE(kCheckpoint, what, " holds a non-finite value (", x[i], ") at element ", first + i,
                 " of ", total, ": the run that wrote it diverged, or the file is corrupt");
}

namespace {
// The whole parameter from every tensor-parallel rank's part (all_gather over tp).
Tensor assemble_tp(comm::Communicator& tp, const nn::Parameter& p, const Tensor& part,
                   Allocator& alloc) {
  const int64_t n = p.numel();
  Tensor all = Tensor::empty({int64_t{tp.size()} * n}, DType::kF32, Category::kBuffers, alloc);
  tp.all_gather(part.view({n}), all);
  Tensor full = Tensor::zeros(p.full, DType::kF32, Category::kBuffers, alloc);
  nn::Parameter q = p;
  for (int j = 0; j < tp.size(); ++j) {
    q.tp.index = j;
    for (const nn::ElementRun& r : nn::element_runs(q))
      full.flat_range(r.global, r.length).copy_from(all.flat_range(j * n + r.local, r.length));
  }
  return full;
}

// Segment i's fp32 weights [at, at + dst.numel()) into dst, in pieces.
void read_weights(optim::AdamW& opt, size_t i, Tensor& dst, int64_t piece) {
  for_each_piece(dst.numel(), piece, [&](int64_t b, int64_t n) {
    Tensor part = dst.flat_range(b, n);
    opt.read_weights(i, b, part);
  });
}
}  // namespace

LocalParams::LocalParams(optim::AdamW& optimizer, model::ParallelGPT& parallel,
                         parallel::ParallelDims& dims, Allocator& allocator, int64_t piece)
    : optimizer_(optimizer),
      parallel_(parallel),
      dims_(dims),
      allocator_(allocator),
      piece_(piece),
      keep_(dims.dp_index() == 0) {}

bool LocalParams::load_item() {
  pending_.clear();
  at_ = 0;
  full_ = Tensor();
  const auto& segs = optimizer_.segments();
  parallel::ShardedDataParallel* sharded = parallel_.sharded();
  if (!sharded) {  // stage 0: every rank holds every parameter whole; dp rank 0 reads them
    if (!keep_ || item_ >= segs.size()) return false;
    const size_t i = item_++;
    if (segs[i].param == parallel_.tied_copy()) return true;
    Tensor w = Tensor::empty({segs[i].numel()}, DType::kF32, Category::kBuffers, allocator_);
    read_weights(optimizer_, i, w, piece_);
    pending_.emplace_back(segs[i].param, w.view(segs[i].param->shape));
    return true;
  }
  const auto& units = sharded->units();
  if (item_ >= units.size()) return false;
  const int u = static_cast<int>(item_++);
  const parallel::ShardUnit& unit = units[u];
  Tensor shard = Tensor::zeros({unit.shard}, DType::kF32, Category::kBuffers, allocator_);
  for (size_t i = 0; i < segs.size(); ++i) {
    const int64_t at = segs[i].state_offset - unit.shard_offset;
    if (at < 0 || at >= unit.shard) continue;
    Tensor dst = shard.flat_range(at, segs[i].numel());
    read_weights(optimizer_, i, dst, piece_);
  }
  full_ = Tensor::empty({unit.padded}, DType::kF32, Category::kBuffers, allocator_);
  sharded->all_gather_unit(u, shard, full_);
  if (!keep_) return true;
  for (size_t k = 0; k < unit.params.size(); ++k) {
    nn::Parameter* p = unit.params[k];
    if (p == parallel_.tied_copy()) continue;
    pending_.emplace_back(p, full_.flat_range(unit.param_offsets[k], p->numel()).view(p->shape));
  }
  return true;
}

bool LocalParams::next(nn::Parameter** p, Tensor* value) {
  // The caller lets go of the previous one: never two parameters at once.
  *value = Tensor();
  assembled_ = Tensor();
  while (at_ == pending_.size())
    if (!load_item()) return false;
  auto& [param, t] = pending_[at_++];
  *p = param;
  *value = t;
  if (dims_.shape().tp > 1) {
    assembled_ = assemble_tp(dims_.tp(), *param, t, allocator_);
    *value = dims_.tp_index() == 0 ? assembled_ : Tensor();
  }
  return true;
}

ModelStream::ModelStream(const RunConfig& cfg, optim::AdamW& optimizer,
                         model::ParallelGPT& parallel, parallel::ParallelDims& dims,
                         Allocator& allocator)
    : tags_(dims.shape().pp, 0),
      dims_(dims),
      allocator_(allocator),
      local_(optimizer, parallel, dims, allocator, checkpoint_piece_elements(cfg.checkpoint)) {
  // Which stage holds each parameter: the chunks each stage builds (no values: a module's
  // parameters are bound to storage only by a ParameterStore).
  const int pp = dims.shape().pp;
  std::map<std::string, int> stage_of;
  for (int s = 0; s < pp; ++s)
    for (const auto& c :
         model::make_gpt_chunks(cfg.model, pp, s, parallel.options().pipeline, cfg.train.seq_len))
      for (nn::Parameter* p : c->parameters())
        if (p->name != cfg.model.token_embedding_name() || c->part().first) stage_of[p->name] = s;
  model::GPT<float> whole(cfg.model);
  for (nn::Parameter* p : whole.parameters()) {
    specs_.push_back({p->name, DType::kF32, p->shape});
    const auto it = stage_of.find(p->name);
    KIRI_CHECK(it != stage_of.end(), "no pipeline stage holds parameter ", p->name);
    stage_.push_back(it->second);
  }
}

const Tensor& ModelStream::next(size_t k) {
  KIRI_CHECK(k == next_ && k < specs_.size(), "model stream: parameter ", k, " asked for, ", next_,
             " is next of ", specs_.size());
  ++next_;
  received_ = Tensor();  // the previous parameter goes before the next comes
  const ckpt::TensorSpec& spec = specs_[k];
  const int s = stage_[k];
  if (s != 0) {
    received_ = Tensor::empty(spec.shape, DType::kF32, Category::kBuffers, allocator_);
    Tensor flat = received_.view({received_.numel()});
    dims_.pp().recv(flat, s, tags_[s]++);
    return received_;
  }
  nn::Parameter* p = nullptr;
  Tensor t;
  // Stage 0's order is a subsequence of the model's, so its next one is this one.
  KIRI_CHECK(local_.next(&p, &t) && p->name == spec.name && t.shape() == spec.shape,
             "model stream: expected ", spec.name, " ", spec.shape.str(), " from this rank, got ",
             p ? p->name : "nothing");
  received_ = t;
  return received_;
}

void ModelStream::finish() {
  KIRI_CHECK(next_ == specs_.size(), "model stream: finished after ", next_, " of ", specs_.size(),
             " parameters");
  nn::Parameter* p = nullptr;
  Tensor t;
  while (local_.next(&p, &t)) KIRI_CHECK(false, "model stream: ", p->name, " was never asked for");
  received_ = Tensor();
}

void ModelStream::run() {
  const bool sender = dims_.pp_index() != 0 && dims_.dp_index() == 0 && dims_.tp_index() == 0;
  nn::Parameter* p = nullptr;
  Tensor t;
  int tag = 0;
  while (local_.next(&p, &t)) {
    if (!sender) continue;
    Tensor flat = t.view({t.numel()});
    dims_.pp().send(flat, 0, tag++);
  }
}

}  // namespace kiri::train
