#include "kiri/comm/mpi/mpi_core.h"

#include <algorithm>
#include <thread>

#include "kiri/base/log.h"

namespace kiri::comm::detail {
namespace {

using namespace std::chrono_literals;

std::exception_ptr make_error(ErrorKind kind, const std::string& message) {
  try {
    raise(kind, message, __FILE__, __LINE__);
  } catch (...) {
    return std::current_exception();
  }
}

std::vector<int> world_ranks_of(MPI_Comm comm, int size) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(size), out(size);
  for (int i = 0; i < size; ++i) ranks[i] = i;
  MPI_Group_translate_ranks(group, size, ranks.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

MpiComm dup(MPI_Comm comm, const std::string& name) {
  MPI_Comm out;
  mpi_check(MPI_Comm_dup(comm, &out), "MPI_Comm_dup", "of " + name);
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  return MpiComm(out);
}

// Operations that never completed: MPI may still use their buffers.
std::vector<std::shared_ptr<MpiWork>>& graveyard() {
  static auto* g = new std::vector<std::shared_ptr<MpiWork>>;  // never freed, on purpose
  return *g;
}

}  // namespace

MpiWork::MpiWork(MpiCore* c, OpKind kind, uint64_t record, std::string w, uint64_t s)
    : PollingWork(c->book, kind, record, c->options.timeout), core(c), what(std::move(w)), seq(s) {}

bool MpiWork::poll() {
  if (!core) {
    if (phase == Phase::kDone) return true;
    if (phase == Phase::kFailed) std::rethrow_exception(error);
    KIRI_RAISE(kCommAborted, what, ": its communicator was destroyed before it completed");
  }
  core->advance();
  if (phase == Phase::kFailed) std::rethrow_exception(error);
  return phase == Phase::kDone;
}

void MpiWork::idle(Clock::time_point until) {
  // MPI moves data only inside MPI calls: poll often at first, then back
  // off so that oversubscribed ranks leave each other the cores.
  MpiCore::progress_all();
  const Clock::time_point now = Clock::now();
  if (idle_polls_++ == 0) idle_since_ = now;
  const auto waited = now - idle_since_;
  if (waited < 20us)  // small messages complete here, at MPI's own latency
    return;
  if (waited < 1ms)
    std::this_thread::yield();
  else
    std::this_thread::sleep_until(std::min(until, now + (waited < 100ms ? 20us : 200us)));
}

void MpiWork::timed_out(double waited_s) {
  if (test()) return;
  if (!core) poll();  // raises kCommAborted
  core->diagnose(*this, waited_s);
}

void MpiWork::set_waiting(bool waiting) {
  set_mpi_waiting(waiting && core ? this : nullptr);
}

MpiCore::MpiCore(MpiComm c, std::string name, const Options& o) : options(o), comm(std::move(c)) {
  MPI_Comm_set_errhandler(comm.get(), MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm.get(), &rank);
  MPI_Comm_size(comm.get(), &size);
  info = GroupInfo{std::move(name), rank, size, world_ranks_of(comm.get(), size)};
  check = dup(comm.get(), info.name);
  diag = dup(comm.get(), info.name);
  ring = dup(comm.get(), info.name);
  find_hosts(rank, size);
  int* tag_ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(comm.get(), MPI_TAG_UB, &tag_ub, &flag);
  if (flag && tag_ub) max_tag = *tag_ub;
  post_listen();
  register_core(true);
}

// Whether this group's ranks sit on more than one host, and whether its ring (rank r to
// r + 1) crosses hosts: each rank's host named by the lowest group rank on it.
void MpiCore::find_hosts(int rank, int size) {
  if (size == 1 || options.across_hosts == Options::AcrossHosts::kNever) return;
  bool apart = options.across_hosts == Options::AcrossHosts::kAlways;
  if (!apart) {
    MPI_Comm node = MPI_COMM_NULL;
    int leader = rank;
    if (MPI_Comm_split_type(comm.get(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
            MPI_SUCCESS &&
        node != MPI_COMM_NULL) {
      MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, node);
      MPI_Comm_free(&node);
    }
    std::vector<int> host_of(static_cast<size_t>(size));
    MPI_Allgather(&leader, 1, MPI_INT, host_of.data(), 1, MPI_INT, comm.get());
    for (int r = 0; r < size; ++r)
      apart =
          apart || host_of[static_cast<size_t>(r)] != host_of[static_cast<size_t>((r + 1) % size)];
  }
  pair_across_hosts = apart && size == 2;
  ring_across_hosts = apart && size > 2;
}

MpiCore::~MpiCore() {
  register_core(false);
  drain(std::min(std::chrono::duration<double>(options.timeout).count(), 5.0));
  abandon();
  if (listen_ != MPI_REQUEST_NULL && !mpi_finalized()) {
    MPI_Cancel(&listen_);
    MPI_Wait(&listen_, MPI_STATUS_IGNORE);
  }
  for (auto& s : sends_) {
    int done = 0;
    if (!mpi_finalized()) MPI_Test(&s->req, &done, MPI_STATUS_IGNORE);
    if (!done && s->req != MPI_REQUEST_NULL) {
      MPI_Request_free(&s->req);
      s.release();  // MPI may still read it
    }
  }
}

// Gives outstanding operations a little while to finish before the communicator goes.
void MpiCore::drain(double seconds) {
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(seconds));
  while ((!collectives_.empty() || !p2p_.empty()) && Clock::now() < deadline && !mpi_finalized()) {
    advance();
    std::this_thread::sleep_for(50us);
  }
}

void MpiCore::abandon() {
  const int left = static_cast<int>(collectives_.size() + p2p_.size());
  if (left == 0) return;
  // MPI may still touch their buffers: the works stay alive for good.
  auto keep = [](const std::shared_ptr<MpiWork>& w) {
    w->core = nullptr;
    graveyard().push_back(w);
  };
  std::for_each(collectives_.begin(), collectives_.end(), keep);
  std::for_each(p2p_.begin(), p2p_.end(), keep);
  note_abandoned(left);
  log::warn("communicator ", info.name, " destroyed with ", left,
            " operation(s) outstanding; MPI_Finalize will be skipped");
}

void MpiCore::submit(const std::shared_ptr<MpiWork>& w, bool collective) {
  if (!collective) {
    const int rc = w->issue(&w->req);
    if (rc != MPI_SUCCESS) {
      check_rc(rc, op_kind_name(w->kind()), *w);
    }
    w->phase = MpiWork::Phase::kRunning;
    p2p_.push_back(w);
    advance();
    return;
  }
  if (options.check_collectives || w->sig.kind == kSplitKind) {
    w->sigs.resize(info.size);
    const int bytes = static_cast<int>(sizeof(Signature));
    check_rc(MPI_Iallgather(&w->sig, bytes, MPI_BYTE, w->sigs.data(), bytes, MPI_BYTE, check.get(),
                            &w->sig_req),
             "MPI_Iallgather (agreement)", *w);
    w->phase = MpiWork::Phase::kAgree;
  }
  collectives_.push_back(w);
  advance();
}

void MpiCore::check_rc(int rc, const char* call, const MpiWork& w) const {
  if (rc != MPI_SUCCESS) mpi_check(rc, call, str(w.what, " ", info.where()));  // text only then
}

void MpiCore::fail(MpiWork& w, std::exception_ptr e) {
  w.error = std::move(e);
  w.phase = MpiWork::Phase::kFailed;
}

void MpiCore::step(MpiWork& w, bool& in_order) {
  using Phase = MpiWork::Phase;
  int flag = 0;
  MPI_Status status;
  try {
    if (w.drive && !w.issued && (w.phase == Phase::kAgree || w.phase == Phase::kAgreed)) {
      check_rc(w.issue(&w.req), op_kind_name(w.kind()), w);
      w.issued = true;
    }
    if (w.phase == Phase::kAgree) {
      check_rc(MPI_Test(&w.sig_req, &flag, MPI_STATUS_IGNORE), "MPI_Test (agreement)", w);
      if (flag) {
        const std::string mismatch = mismatch_message(info, w.sigs);
        if (!mismatch.empty())
          return fail(w, make_error(ErrorKind::kCommMismatch,
                                    str(mismatch, " [seen by ", info.rank_name(info.rank), "]")));
        w.phase = Phase::kAgreed;
      }
    }
    if (w.phase == Phase::kAgreed && (in_order || w.issued)) {
      if (w.issue && !w.issued) check_rc(w.issue(&w.req), op_kind_name(w.kind()), w);
      w.phase = w.issue ? Phase::kRunning : Phase::kDone;
      if (w.phase == Phase::kDone) w.note_finished();
    }
    if (w.phase == Phase::kAgree || w.phase == Phase::kAgreed) in_order = false;
    if (w.phase == Phase::kRunning && w.drive) {
      if (!w.drive()) return;
      if (w.finish) w.finish();
      w.phase = Phase::kDone;
      w.note_finished();
    }
    if (w.phase == Phase::kRunning) {
      check_rc(MPI_Test(&w.req, &flag, &status), "MPI_Test", w);
      if (!flag) return;
      if (w.recv_count >= 0) {
        int got = 0;
        MPI_Get_count(&status, w.recv_type, &got);
        KIRI_CHECK_KIND(kCommMismatch, got == w.recv_count, w.what, " ", info.where(),
                        ": the matching send carried ", got, " elements");
      }
      if (w.finish) w.finish();
      w.phase = Phase::kDone;
      w.note_finished();
    }
  } catch (...) {
    fail(w, std::current_exception());
  }
}

void MpiCore::advance() {
  using Phase = MpiWork::Phase;
  bool in_order = true;  // every earlier collective has started its transfer
  for (auto& w : collectives_) step(*w, in_order);
  for (auto& w : p2p_) {
    bool ignored = true;
    step(*w, ignored);
  }
  auto finished = [](const std::shared_ptr<MpiWork>& w) {
    return w->phase == Phase::kDone || w->phase == Phase::kFailed;
  };
  // A transfer of kiri's that failed (a mismatch found by its agreement, say) may still
  // have messages posted into its buffers.
  for (auto& w : collectives_)
    if (w->phase == Phase::kFailed && w->issued) graveyard().push_back(w);
  std::erase_if(collectives_, finished);
  std::erase_if(p2p_, finished);
  service();
}

MPI_Comm MpiCore::split(int color, int key) {
  MPI_Comm out = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(check.get(), color < 0 ? MPI_UNDEFINED : color, key, &out),
            "MPI_Comm_split", info.where());
  return out;
}

}  // namespace kiri::comm::detail
