#pragma once
// Which host's link is slow. A collective runs at the pace of its slowest link, so every
// rank waits alike and the per-rank communication wait cannot say where the slow link is.
// The probe can: the first rank of each host exchanges kProbeBytes with the first rank of
// every other host, one pair at a time per rank (a round-robin tournament), and times each
// exchange. A host's rate is the rate of its fastest pair: a slow link slows every pair of
// its own host and no pair of the others. A host is slow when its rate is below 1/kSlowFactor
// of the fastest host's now or of its own first measurement (with 2 hosts, the only pair:
// then both are named, the link between them).
//
// The rates are the exchange's, not the link's: a shaped link lets a burst through at once,
// and the probe is short. They rank links; they do not measure them (docs/cluster.md).
#include <memory>
#include <string>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/parallel/dims.h"
#include "kiri/tensor/allocator.h"

namespace kiri::parallel {

struct LinkRates {
  std::vector<double> bytes_per_s;  // [hosts] each host's fastest exchange (rank 0 only)
  std::vector<int> slow;            // hosts below 1/kSlowFactor, ascending
  double seconds = 0;               // the probe's own time on this rank
};

class LinkProbe {
 public:
  static constexpr int64_t kProbeBytes = 1 << 20;
  static constexpr double kSlowFactor = 4;

  // Collective over `world` (makes the group of the hosts' first ranks), then measures once:
  // the baseline each host's later rates are compared with.
  LinkProbe(comm::Communicator& world, const HostMap& hosts, Allocator& allocator);
  ~LinkProbe();

  // Collective over the hosts' first ranks (the other ranks return at once, with nothing).
  // The rates and the slow hosts are rank 0's.
  LinkRates measure();

 private:
  void exchange_warmup();
  void handshake(int peer);   // a one-element exchange with `peer` (leaders' rank)
  double exchange(int peer);  // bytes/s of one timed exchange with `peer` (leaders' rank)

  std::unique_ptr<comm::Communicator> leaders_;  // nullptr on ranks that are not first
  Tensor out_, in_, rates_, all_rates_;
  std::vector<double> first_;  // [hosts] the first measurement (rank 0)
};

}  // namespace kiri::parallel
