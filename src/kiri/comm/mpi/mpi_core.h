#pragma once
// The MPI backend's machinery. Each communicator owns an MpiCore with three
// MPI communicators: `comm` moves the data, `check` carries the agreement
// (an MPI_Iallgather of each collective's Signature) and split, `diag`
// carries hang diagnoses. A collective is a small state machine advanced by
// polling: agree -> (agreed) -> running -> done. A fourth, `ring`, carries
// kiri's own point-to-point all-reduce (mpi_ring.h). MPI's data transfers start in seq
// order, because MPI matches collectives on a communicator by issue order; kiri's own
// start at once (MpiWork::issued).
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiri/comm/diagnosis.h"
#include "kiri/comm/mpi/mpi_handles.h"
#include "kiri/comm/mpi/mpi_ring.h"
#include "kiri/comm/polling_work.h"

namespace kiri::comm::detail {

class MpiCore;

class MpiWork final : public PollingWork {
 public:
  enum class Phase { kAgree, kAgreed, kRunning, kDone, kFailed };
  MpiWork(MpiCore* core, OpKind kind, uint64_t record, std::string what, uint64_t seq);

  // Set up by the communicator before submit().
  Signature sig;
  std::vector<Signature> sigs;             // the agreement's receive buffer
  std::function<int(MPI_Request*)> issue;  // starts the transfer; null: nothing to move
  std::function<void()> finish;            // after the transfer (avg divides, scratch copies)
  // A transfer kiri drives itself (the ring all-reduce) instead of one MPI
  // request: tests once, raises on failure, true when done.
  std::function<bool()> drive;
  // A drive transfer starts at submit, before its agreement completes: its messages are
  // tagged by seq on `ring`, so their order does not matter, and drive and finish (which
  // apply the result) wait for the agreement. A mismatch fails the work with the transfer
  // still posted; the work then stays alive for good (its buffers may still be written).
  bool issued = false;
  std::vector<Tensor> keep;         // storage MPI may touch stays alive
  std::vector<int> counts, displs;  // v-collective arguments live as long as the request
  // A copy or a receive buffer of the transfer's (input and output overlap, a pair's half,
  // the ring's working copy): Options::scratch_memory's.
  std::unique_ptr<PooledScratch> scratch;
  MPI_Datatype recv_type = MPI_DATATYPE_NULL;
  int recv_count = -1;      // recv: the count that must arrive
  int peer = -1, tag = -1;  // send/recv

  MPI_Request sig_req = MPI_REQUEST_NULL, req = MPI_REQUEST_NULL;
  Phase phase = Phase::kAgreed;
  std::exception_ptr error;
  MpiCore* core;  // null once the communicator is gone
  const std::string what;
  const uint64_t seq;  // collective seq; 0 for send/recv

 protected:
  bool poll() override;
  void idle(Clock::time_point until) override;
  void timed_out(double waited_s) override;
  void set_waiting(bool waiting) override;

 private:
  Clock::time_point idle_since_{};
  int idle_polls_ = 0;
};

// Diagnosis wire format: fixed-size, sent as bytes.
struct WireRecord {
  uint64_t seq;
  int64_t bytes;
  int32_t kind, peer, done, pad;
};
struct DiagReply {
  int32_t round = 0;
  int32_t count = 0;
  char activity[160] = {};
  WireRecord ring[kRingSize] = {};
};

class MpiCore {
 public:
  MpiCore(MpiComm comm, std::string name, const Options& options);
  ~MpiCore();
  MpiCore(const MpiCore&) = delete;
  MpiCore& operator=(const MpiCore&) = delete;

  // Queues a collective (agreeing first when checked) or starts a send/recv.
  void submit(const std::shared_ptr<MpiWork>& w, bool collective);
  // Tests every outstanding request once; starts agreed transfers in seq order.
  void advance();
  // After a timeout: gathers the other ranks' rings over `diag` for up to the
  // grace period. Returns true if w completed meanwhile; else raises kCommTimeout.
  bool diagnose(MpiWork& w, double waited_s);
  // Answers other ranks' diagnosis requests on this communicator.
  void service();
  // advance() on every live communicator of the process, as MPI's own progress
  // engine would: a rank blocked on one communicator must still start the
  // agreed transfers of the others, which their other ranks may be waiting for.
  static void progress_all();
  // A blocking wait for a split's agreement, then MPI_Comm_split on `check`.
  MPI_Comm split(int color, int key);

  GroupInfo info;
  Options options;
  std::shared_ptr<OpBook> book = std::make_shared<OpBook>();
  MpiComm comm, check, diag;
  MpiComm ring;  // kiri's own point-to-point collectives: never matches user sends
  int max_tag = 32767;
  // Two ranks that share no host (MPI_COMM_TYPE_SHARED), or any two under
  // Options::AcrossHosts::kAlways: Options::pair_piece_bytes applies.
  bool pair_across_hosts = false;
  // More ranks, whose ring crosses hosts (or kAlways): reduce_scatter and all_gather take
  // kiri's ring (Options::across_hosts).
  bool ring_across_hosts = false;

 private:
  struct PendingSend {
    MPI_Request req = MPI_REQUEST_NULL;
    int32_t round = 0;
    DiagReply reply;
  };
  void step(MpiWork& w, bool& in_order);
  void fail(MpiWork& w, std::exception_ptr e);
  void check_rc(int rc, const char* call, const MpiWork& w) const;
  void post_listen();
  void send_reply(int to, int32_t round);
  void send_request(int to, int32_t round);
  void drain(double seconds);
  void register_core(bool add);
  void find_hosts(int rank, int size);
  void abandon();

  std::deque<std::shared_ptr<MpiWork>> collectives_;  // seq order
  std::vector<std::shared_ptr<MpiWork>> p2p_;
  MPI_Request listen_ = MPI_REQUEST_NULL;
  int32_t incoming_ = 0;  // the round of a request being received
  int32_t round_ = 0;
  std::deque<std::unique_ptr<PendingSend>> sends_;
};

// The work this process is blocked in (null: none), for answers to
// diagnosis requests; described only when asked, so waiting stays cheap.
void set_mpi_waiting(const MpiWork* work);

}  // namespace kiri::comm::detail
