#include "kiri/parallel/dims.h"

#include <unistd.h>

#include <cstring>
#include <map>

#include "kiri/base/error.h"
#include "kiri/base/hash.h"
#include "kiri/tensor/tensor.h"

namespace kiri::parallel {

namespace {

uint64_t hostname_key() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) return 0;
  return fnv1a64(std::string_view(name));
}

}  // namespace

std::string MeshShape::str() const {
  return kiri::str("dp ", dp, " x tp ", tp, " x pp ", pp);
}

ParallelDims::ParallelDims(comm::Communicator& world, const MeshShape& shape,
                           std::optional<uint64_t> host_key)
    : world_(world), shape_(shape), host_key_(host_key.value_or(hostname_key())) {
  KIRI_CHECK_KIND(kConfig, shape.dp >= 1 && shape.tp >= 1 && shape.pp >= 1, "mesh ", shape.str(),
                  ": every degree must be at least 1");
  KIRI_CHECK_KIND(kConfig, shape.world() == world.size(), "mesh ", shape.str(), " needs ",
                  shape.world(), " ranks, the world has ", world.size());
  const int r = world.rank();
  tp_index_ = r % shape.tp;
  dp_index_ = (r / shape.tp) % shape.dp;
  pp_index_ = r / (shape.tp * shape.dp);
  // Ranks with equal color share a group; the key orders them by their index in it.
  dp_ = world.split(pp_index_ * shape.tp + tp_index_, dp_index_, "dp");
  tp_ = world.split(pp_index_ * shape.dp + dp_index_, tp_index_, "tp");
  pp_ = world.split(dp_index_ * shape.tp + tp_index_, pp_index_, "pp");
}

ParallelDims::~ParallelDims() = default;

std::string ParallelDims::coordinates() const {
  return str("rank ", rank(), " = (dp ", dp_index_, ", tp ", tp_index_, ", pp ", pp_index_, ")");
}

void ParallelDims::make_hybrid_groups(int group) {
  KIRI_CHECK_KIND(kConfig, group >= 1 && group < shape_.dp && shape_.dp % group == 0,
                  "hybrid sharding: a shard group of ", group,
                  " ranks must divide dp = ", shape_.dp, " and be smaller than it");
  if (hybrid_group_ == group) return;
  KIRI_CHECK(hybrid_group_ == 0, "hybrid sharding groups of ", hybrid_group_,
             " ranks exist; asked for ", group);
  comm::Communicator& dp = *dp_;
  shard_ = dp.split(dp.rank() / group, dp.rank(), "dp_shard");
  replica_ = dp.split(dp.rank() % group, dp.rank(), "dp_replicate");
  hybrid_group_ = group;
}

comm::Communicator& ParallelDims::shard_group(int group) {
  make_hybrid_groups(group);
  return *shard_;
}

comm::Communicator& ParallelDims::replica_group(int group) {
  make_hybrid_groups(group);
  return *replica_;
}

comm::Communicator* ParallelDims::embedding_group() {
  KIRI_CHECK(shape_.pp > 1, "the embedding group joins pipeline stages: pp is 1");
  if (!embedding_made_) {
    const bool end = pp_index_ == 0 || pp_index_ == shape_.pp - 1;
    embedding_ = world_.split(end ? dp_index_ * shape_.tp + tp_index_ : -1, pp_index_, "embedding");
    embedding_made_ = true;
  }
  return embedding_.get();
}

const HostMap& ParallelDims::hosts() {
  if (hosts_) return *hosts_;
  // Every rank's key through one all_gather, as two int32 halves (no arithmetic touches them).
  Allocator alloc;
  Tensor mine = Tensor::empty({2}, DType::kI32, Category::kOther, alloc);
  Tensor all = Tensor::empty({2 * world_.size()}, DType::kI32, Category::kOther, alloc);
  std::memcpy(mine.data<int32_t>(), &host_key_, sizeof host_key_);
  world_.all_gather(mine, all);
  HostMap h;
  std::map<uint64_t, int> index;
  for (int r = 0; r < world_.size(); ++r) {
    uint64_t key = 0;
    std::memcpy(&key, all.data<int32_t>() + 2 * r, sizeof key);
    h.host_of.push_back(index.emplace(key, static_cast<int>(index.size())).first->second);
  }
  h.hosts = static_cast<int>(index.size());
  const int host = h.host_of[static_cast<size_t>(world_.rank())];
  h.local_size = 0;
  for (int r = 0; r < world_.size(); ++r)
    if (h.host_of[static_cast<size_t>(r)] == host) {
      if (r == world_.rank()) h.local_rank = h.local_size;
      ++h.local_size;
    }
  hosts_ = std::move(h);
  return *hosts_;
}

std::vector<comm::Communicator*> ParallelDims::groups() {
  std::vector<comm::Communicator*> out = {&world_, dp_.get()};
  if (shape_.tp > 1) out.push_back(tp_.get());
  if (shape_.pp > 1) out.push_back(pp_.get());
  for (comm::Communicator* c : {shard_.get(), replica_.get(), embedding_.get()})
    if (c) out.push_back(c);
  return out;
}

}  // namespace kiri::parallel
