#include "kiri/parallel/link_probe.h"

#include <algorithm>

#include "kiri/base/timer.h"

namespace kiri::parallel {

namespace {

constexpr int kProbeTag = 0x4b4c;  // "KL": no other traffic is on the leaders' group

// Round `round` of the circle method for n players (n even; player n - 1 stays put): the
// opponent of player i.
int opponent(int i, int round, int n) {
  if (i == n - 1) return round;
  if (i == round) return n - 1;
  return ((2 * round - i) % (n - 1) + (n - 1)) % (n - 1);
}

}  // namespace

LinkProbe::LinkProbe(comm::Communicator& world, const HostMap& hosts, Allocator& allocator) {
  const int host = hosts.host_of[static_cast<size_t>(world.rank())];
  leaders_ = world.split(hosts.local_rank == 0 ? 0 : -1, host, "hosts");
  if (!leaders_) return;
  const int64_t n = kProbeBytes / 4;
  out_ = Tensor::empty({n}, DType::kF32, Category::kBuffers, allocator);
  in_ = Tensor::empty({n}, DType::kF32, Category::kBuffers, allocator);
  std::fill_n(out_.data<float>(), n, 1.0f);
  rates_ = Tensor::empty({1}, DType::kF64, Category::kBuffers, allocator);
  all_rates_ = Tensor::empty({leaders_->size()}, DType::kF64, Category::kBuffers, allocator);
  exchange_warmup();
  first_ = measure().bytes_per_s;
}

LinkProbe::~LinkProbe() = default;

void LinkProbe::exchange_warmup() {
  // The first message between two ranks opens their connection: not part of any rate.
  const int n = leaders_->size() + leaders_->size() % 2;
  for (int round = 0; round < n - 1; ++round)
    if (const int peer = opponent(leaders_->rank(), round, n); peer < leaders_->size())
      handshake(peer);
}

void LinkProbe::handshake(int peer) {
  Tensor a = out_.slice(0, 1), b = in_.slice(0, 1);
  comm::WorkHandle s = leaders_->send_async(a, peer, kProbeTag);
  comm::WorkHandle r = leaders_->recv_async(b, peer, kProbeTag);
  s->wait();
  r->wait();
}

double LinkProbe::exchange(int peer) {
  // Both sides are ready first: the time is the transfer's, not the wait for a peer still
  // busy with its previous pair.
  handshake(peer);
  Timer t;
  comm::WorkHandle s = leaders_->send_async(out_, peer, kProbeTag);
  comm::WorkHandle r = leaders_->recv_async(in_, peer, kProbeTag);
  s->wait();
  r->wait();
  return static_cast<double>(kProbeBytes) / std::max(t.seconds(), 1e-9);
}

LinkRates LinkProbe::measure() {
  LinkRates out;
  if (!leaders_) return out;
  Timer timer;
  const int size = leaders_->size(), n = size + size % 2;
  double best = 0;
  for (int round = 0; round < n - 1; ++round)
    if (const int peer = opponent(leaders_->rank(), round, n); peer < size)
      best = std::max(best, exchange(peer));
  rates_.data<double>()[0] = best;
  leaders_->all_gather(rates_, all_rates_);
  out.seconds = timer.seconds();
  if (leaders_->rank() != 0) return out;
  out.bytes_per_s.assign(all_rates_.data<double>(), all_rates_.data<double>() + size);
  const double fastest = *std::max_element(out.bytes_per_s.begin(), out.bytes_per_s.end());
  for (int h = 0; h < size; ++h) {
    const double ref = std::max(fastest, first_.empty() ? 0.0 : first_[static_cast<size_t>(h)]);
    if (out.bytes_per_s[static_cast<size_t>(h)] * kSlowFactor < ref) out.slow.push_back(h);
  }
  return out;
}

}  // namespace kiri::parallel
