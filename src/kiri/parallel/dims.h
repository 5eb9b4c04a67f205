#pragma once
// ParallelDims: the degrees of a run and every process group its cuts communicate on, made in
// this one place (torchtitan's ParallelDims). world = dp x tp x pp ranks, tp innermost, then
// dp, then pp (Megatron-LM's order, so tensor-parallel peers are neighbours):
//   rank = pp_index * (dp * tp) + dp_index * tp + tp_index
// The dp, tp and pp groups are split when the dims are made; the groups that only some layouts
// use (hybrid sharding's shard and replica groups, the tied embedding's group of the first and
// last pipeline stage) and the host map are made on first use. Each is collective over the
// world (or the dp group), so every rank asks for them in the same order (ParallelGPT's
// constructor does). The layout's rules are checked before (kiri::validate_layout).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiri/comm/communicator.h"

namespace kiri::parallel {

struct MeshShape {
  int dp = 1, tp = 1, pp = 1;
  int world() const { return dp * tp * pp; }
  std::string str() const;  // "dp 2 x tp 1 x pp 1"
};

// Which ranks share a host: host index per world rank, numbered in the order the hosts first
// appear (rank 0's host is 0), and this rank's place among its host's ranks.
struct HostMap {
  std::vector<int> host_of;  // [world]
  int hosts = 1;
  int local_rank = 0;              // this rank's index among the ranks of its host
  int local_size = 1;              // ranks on this rank's host
  std::vector<std::string> names;  // [hosts] each host's hostname (its first rank's)
};

// Which ranks share a host (collective over world: two all_gathers). `host_key` stands for
// this rank's host (tests give ranks on threads different hosts); by default the hash of its
// hostname and network namespace. ParallelDims::hosts() is this, made once.
HostMap gather_host_map(comm::Communicator& world, std::optional<uint64_t> host_key = std::nullopt);

class ParallelDims {
 public:
  // Learns which ranks share a host, then splits world into the dp, tp and pp groups
  // (collective over world). `host_key` stands for this rank's host (tests give ranks on
  // threads different hosts); by default the hash of its hostname and network namespace.
  // The mesh orders ranks host by host (Megatron's and torchtitan's order: tp innermost, so
  // inside a host; then dp, then pp): a launcher that placed ranks round robin (rank 0 on
  // host A, rank 1 on host B, ...) gets the same groups inside hosts as one that placed
  // them host by host. mesh_rank() is this rank's place in that order.
  ParallelDims(comm::Communicator& world, const MeshShape& shape,
               std::optional<uint64_t> host_key = std::nullopt);
  ~ParallelDims();

  const MeshShape& shape() const { return shape_; }
  int rank() const { return world_.rank(); }
  int mesh_rank() const { return mesh_rank_; }  // pp * dp * tp + dp * tp + tp index
  int dp_index() const { return dp_index_; }
  int tp_index() const { return tp_index_; }
  int pp_index() const { return pp_index_; }
  comm::Communicator& world() { return world_; }
  comm::Communicator& dp() { return *dp_; }
  comm::Communicator& tp() { return *tp_; }
  comm::Communicator& pp() { return *pp_; }
  std::string coordinates() const;  // "rank 3 = (dp 1, tp 1, pp 0)"

  // Hybrid sharding (FSDP HYBRID_SHARD): blocks of `group` consecutive dp ranks share one
  // sharded copy (shard group, "dp_shard"); the ranks at the same place in every block hold
  // replicas (replica group, "dp_replicate"). group must divide dp and be smaller than it (the
  // whole dp group is dp()). Collective over the dp group on the first call; one size per run.
  comm::Communicator& shard_group(int group);
  comm::Communicator& replica_group(int group);
  // pp > 1: the first and last pipeline stage's ranks at the same (dp, tp) place, which sum
  // the tied embedding's gradients ("embedding"; the middle stages are in no such group and
  // get nullptr). Collective over the world on the first call.
  comm::Communicator* embedding_group();
  // Which ranks share a host (made by the constructor).
  const HostMap& hosts() const { return hosts_; }
  // The host map in one line, after hosts(): "2 hosts (host 0: ranks 0-1; host 1: ranks 2-3);
  // tp inside hosts, dp across hosts", naming each group of more than one rank (and hybrid
  // sharding's shard group of `shard_group` dp ranks when it is one) inside or across hosts.
  std::string host_summary(int shard_group = 0) const;
  // The groups whose ranks should share a host (tp, hybrid sharding's shard group) but do not,
  // e.g. {"tp"}: they run over the slower link between hosts.
  std::vector<std::string> groups_across_hosts(int shard_group = 0) const;
  // The ranks of each host by hostname, after hosts(): "kiri-h0: ranks 0-1; kiri-h1: ranks
  // 2-3" (what a communication timeout adds, so that a missing rank names its host).
  std::string ranks_by_host() const;
  // The hosts of these world ranks, each with its ranks among them: "kc-h1 (ranks 2-3)".
  std::string hosts_of(const std::vector<int>& world_ranks) const;

  // Every group made so far, each once: world, dp, tp and pp when larger than one rank, then
  // the shard, replica and embedding groups when this rank has them.
  std::vector<comm::Communicator*> groups();

 private:
  void make_hybrid_groups(int group);

  comm::Communicator& world_;
  MeshShape shape_;
  HostMap hosts_;
  std::vector<int> host_at_;  // [world] the host of each mesh rank (non-decreasing)
  bool reordered_ = false;    // some mesh rank differs from its world rank
  int mesh_rank_ = 0;
  int dp_index_, tp_index_, pp_index_;
  std::unique_ptr<comm::Communicator> dp_, tp_, pp_;
  int hybrid_group_ = 0;
  std::unique_ptr<comm::Communicator> shard_, replica_;
  bool embedding_made_ = false;
  std::unique_ptr<comm::Communicator> embedding_;
};

}  // namespace kiri::parallel
