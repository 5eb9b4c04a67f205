#include "harness.h"

#include "kiri/comm/local/local.h"

namespace kiri::comm::testing {
namespace {
std::unique_ptr<Communicator>& world() {
  static std::unique_ptr<Communicator> w;
  return w;
}
}  // namespace

Options test_options() {
  Options o;
  o.timeout = std::chrono::seconds(20);
  o.diagnosis_grace = std::chrono::milliseconds(500);
  return o;
}

bool mpi_mode() {
  return world() != nullptr;
}

bool skip_unless_ranks(int n) {
  return mpi_mode() && world()->size() != n;
}

void run_ranks(int n, const std::function<void(Communicator&)>& body, const Options& options) {
  if (!mpi_mode()) {
    run_local(n, body, options);
    return;
  }
  ASSERT_EQ(world()->size(), n);
  world()->set_options(options);
  // A fresh communicator per test: its own seq numbers and stats, and a
  // failed test leaves nothing pending on the next one's.
  std::unique_ptr<Communicator> c = world()->split(0, world()->rank(), "world");
  body(*c);
}

void set_mpi_world(std::unique_ptr<Communicator> w) {
  world() = std::move(w);
}

}  // namespace kiri::comm::testing
