#include "kiri/parallel/dims.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "kiri/base/error.h"
#include "kiri/base/hash.h"
#include "kiri/tensor/tensor.h"

namespace kiri::parallel {

namespace {

// A host is a hostname and a network namespace: the namespaces of one machine (containers,
// or scripts/cluster.sh's hosts) are hosts of their own, as they are to Open MPI, which starts
// one daemon in each and gives MPI_COMM_TYPE_SHARED one node per daemon.
uint64_t hostname_key() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) return 0;
  char ns[128] = {0};  // "net:[4026531840]"
  const ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  const std::string key = std::string(name) + "/" + (n > 0 ? std::string(ns, size_t(n)) : "");
  return fnv1a64(std::string_view(key));
}

}  // namespace

std::string MeshShape::str() const {
  return kiri::str("dp ", dp, " x tp ", tp, " x pp ", pp);
}

ParallelDims::ParallelDims(comm::Communicator& world, const MeshShape& shape,
                           std::optional<uint64_t> host_key)
    : world_(world), shape_(shape) {
  KIRI_CHECK_KIND(kConfig, shape.dp >= 1 && shape.tp >= 1 && shape.pp >= 1, "mesh ", shape.str(),
                  ": every degree must be at least 1");
  KIRI_CHECK_KIND(kConfig, shape.world() == world.size(), "mesh ", shape.str(), " needs ",
                  shape.world(), " ranks, the world has ", world.size());
  hosts_ = gather_host_map(world, host_key);
  // The mesh order: host by host (hosts numbered by their first rank), world rank within one.
  std::vector<int> order(static_cast<size_t>(world.size()));
  for (int i = 0; i < world.size(); ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return hosts_.host_of[static_cast<size_t>(a)] < hosts_.host_of[static_cast<size_t>(b)];
  });
  for (int p = 0; p < world.size(); ++p) {
    const int w = order[static_cast<size_t>(p)];
    host_at_.push_back(hosts_.host_of[static_cast<size_t>(w)]);
    reordered_ = reordered_ || w != p;
    if (w == world.rank()) mesh_rank_ = p;
  }
  const int r = mesh_rank_;
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

HostMap gather_host_map(comm::Communicator& world, std::optional<uint64_t> host_key) {
  const uint64_t key = host_key.value_or(hostname_key());
  // Every rank's key through one all_gather, as two int32 halves (no arithmetic touches them).
  Allocator alloc;
  Tensor mine = Tensor::empty({2}, DType::kI32, Category::kOther, alloc);
  Tensor all = Tensor::empty({2 * world.size()}, DType::kI32, Category::kOther, alloc);
  std::memcpy(mine.data<int32_t>(), &key, sizeof key);
  world.all_gather(mine, all);
  // And every rank's hostname, in 64 bytes (longer names are cut: they only label messages).
  constexpr int kNameInts = 16;
  Tensor my_name = Tensor::zeros({kNameInts}, DType::kI32, Category::kOther, alloc);
  Tensor names = Tensor::empty({kNameInts * world.size()}, DType::kI32, Category::kOther, alloc);
  char name[4 * kNameInts] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) std::strcpy(name, "?");
  std::memcpy(my_name.data<int32_t>(), name, sizeof name);
  world.all_gather(my_name, names);
  HostMap h;
  std::map<uint64_t, int> index;
  for (int r = 0; r < world.size(); ++r) {
    uint64_t k = 0;
    std::memcpy(&k, all.data<int32_t>() + 2 * r, sizeof k);
    const auto [it, added] = index.emplace(k, static_cast<int>(index.size()));
    h.host_of.push_back(it->second);
    if (added) {
      const char* n = reinterpret_cast<const char*>(names.data<int32_t>() + kNameInts * r);
      h.names.emplace_back(n, strnlen(n, 4 * kNameInts - 1));
    }
  }
  h.hosts = static_cast<int>(index.size());
  const int host = h.host_of[static_cast<size_t>(world.rank())];
  h.local_size = 0;
  for (int r = 0; r < world.size(); ++r)
    if (h.host_of[static_cast<size_t>(r)] == host) {
      if (r == world.rank()) h.local_rank = h.local_size;
      ++h.local_size;
    }
  return h;
}

namespace {

// "0-1, 4" for ranks {0, 1, 4}.
std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

// Whether every group keeps to one host. In the mesh (mesh rank = pp * dp * tp + dp * tp + tp
// index; host_at: the host of each mesh rank) a group is `size` ranks `stride` apart (tp: 1, dp:
// tp, pp: dp * tp), and hybrid sharding's shard group a block of `block` consecutive dp ranks of it
// (block = size otherwise).
bool inside_hosts(const std::vector<int>& host_at, int stride, int size, int block) {
  for (int r = 0; r < static_cast<int>(host_at.size()); ++r) {
    const int i = (r / stride) % size, first = i - i % block;
    for (int k = first; k < first + block; ++k)
      if (host_at[static_cast<size_t>(r + (k - i) * stride)] != host_at[static_cast<size_t>(r)])
        return false;
  }
  return true;
}

// Each host's world ranks, ascending.
std::vector<std::vector<int>> ranks_of_hosts(const HostMap& h) {
  std::vector<std::vector<int>> ranks(static_cast<size_t>(h.hosts));
  for (size_t r = 0; r < h.host_of.size(); ++r)
    ranks[static_cast<size_t>(h.host_of[r])].push_back(static_cast<int>(r));
  return ranks;
}

}  // namespace

std::vector<std::string> ParallelDims::groups_across_hosts(int shard_group) const {
  const MeshShape& s = shape_;
  std::vector<std::string> out;
  if (s.tp > 1 && !inside_hosts(host_at_, 1, s.tp, s.tp)) out.push_back("tp");
  if (shard_group > 1 && shard_group < s.dp && !inside_hosts(host_at_, s.tp, s.dp, shard_group))
    out.push_back("shard");
  return out;
}

std::string ParallelDims::ranks_by_host() const {
  const std::vector<std::vector<int>> ranks = ranks_of_hosts(hosts_);
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i)
    out += kiri::str(i ? "; " : "", hosts_.names[i], ranks[i].size() == 1 ? ": rank " : ": ranks ",
                     rank_ranges(ranks[i]));
  return out;
}

std::string ParallelDims::hosts_of(const std::vector<int>& world_ranks) const {
  std::vector<std::vector<int>> by_host(static_cast<size_t>(hosts_.hosts));
  for (int r : world_ranks)
    if (r >= 0 && r < static_cast<int>(hosts_.host_of.size()))
      by_host[static_cast<size_t>(hosts_.host_of[static_cast<size_t>(r)])].push_back(r);
  std::string out;
  for (size_t i = 0; i < by_host.size(); ++i)
    if (!by_host[i].empty())
      out +=
          kiri::str(out.empty() ? "" : ", ", hosts_.names[i],
                    by_host[i].size() == 1 ? " (rank " : " (ranks ", rank_ranges(by_host[i]), ")");
  return out;
}

std::string ParallelDims::host_summary(int shard_group) const {
  const HostMap& h = hosts_;
  const std::vector<std::vector<int>> ranks = ranks_of_hosts(h);
  std::string out = kiri::str(h.hosts, h.hosts == 1 ? " host (" : " hosts (");
  for (size_t i = 0; i < ranks.size(); ++i)
    out += kiri::str(i ? "; " : "", "host ", i, ": ranks ", rank_ranges(ranks[i]));
  out += ")";
  if (h.hosts == 1) return out;
  const MeshShape& s = shape_;
  auto where = [&](int stride, int size, int block) {
    return inside_hosts(host_at_, stride, size, block) ? " inside hosts" : " across hosts";
  };
  std::vector<std::string> parts;
  if (s.tp > 1) parts.push_back(str("tp", where(1, s.tp, s.tp)));
  if (shard_group > 1 && shard_group < s.dp)
    parts.push_back(str("shard group", where(s.tp, s.dp, shard_group)));
  if (s.dp > 1) parts.push_back(str("dp", where(s.tp, s.dp, s.dp)));
  if (s.pp > 1) parts.push_back(str("pp", where(s.dp * s.tp, s.pp, s.pp)));
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "; ") + parts[i];
  if (reordered_) out += " (the launcher placed ranks round robin: the mesh orders them by host)";
  return out;
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
