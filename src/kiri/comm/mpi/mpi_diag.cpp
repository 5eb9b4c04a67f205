// Hang diagnosis over each communicator's `diag` duplicate. Every rank keeps
// a receive posted for requests; whenever it polls anything (wait, test,
// progress) it answers with its ring of recent operations and what it is
// blocked in. A rank that times out asks all the others and names those
// that do not answer within the grace period: dead, or stuck outside
// communication. Replies carry the request's round, so late answers to an
// earlier diagnosis are recognised and dropped.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "kiri/comm/mpi/mpi_core.h"

namespace kiri::comm::detail {
namespace {

using namespace std::chrono_literals;

constexpr int kRequestTag = 1;
constexpr int kReplyTag = 2;

const MpiWork*& waiting_in() {
  static const MpiWork* w = nullptr;
  return w;
}

std::string activity() {
  const MpiWork* w = waiting_in();
  return w && w->core ? str("waiting in ", w->what, " on ", w->core->info.name) : "";
}

// Live cores, so that a rank blocked on one communicator advances and answers on all.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<MpiCore*>& registry() {
  static std::vector<MpiCore*> r;
  return r;
}

RankReport decode(const DiagReply& reply) {
  RankReport r;
  r.answered = true;
  r.activity.assign(reply.activity, strnlen(reply.activity, sizeof reply.activity));
  const int n = std::clamp<int>(reply.count, 0, static_cast<int>(kRingSize));
  for (int i = 0; i < n; ++i) {
    const WireRecord& w = reply.ring[i];
    r.ring.push_back(OpRecord{w.seq, static_cast<OpKind>(w.kind), w.bytes, w.peer, w.done != 0});
  }
  return r;
}

}  // namespace

void set_mpi_waiting(const MpiWork* work) {
  waiting_in() = work;
}

void MpiCore::post_listen() {
  const int rc =
      MPI_Irecv(&incoming_, 1, MPI_INT32_T, MPI_ANY_SOURCE, kRequestTag, diag.get(), &listen_);
  if (rc != MPI_SUCCESS) listen_ = MPI_REQUEST_NULL;  // diagnoses are best effort
}

void MpiCore::send_reply(int to, int32_t round) {
  auto s = std::make_unique<PendingSend>();
  s->reply.round = round;
  std::string a = activity();
  if (a.empty()) a = "inside progress() or test(), not blocked in wait()";
  std::strncpy(s->reply.activity, a.c_str(), sizeof s->reply.activity - 1);
  const std::vector<OpRecord> ring = book->recent();
  s->reply.count = static_cast<int32_t>(ring.size());
  for (size_t i = 0; i < ring.size(); ++i)
    s->reply.ring[i] =
        WireRecord{ring[i].seq,  ring[i].bytes,        static_cast<int32_t>(ring[i].kind),
                   ring[i].peer, ring[i].done ? 1 : 0, 0};
  if (MPI_Isend(&s->reply, sizeof(DiagReply), MPI_BYTE, to, kReplyTag, diag.get(), &s->req) ==
      MPI_SUCCESS)
    sends_.push_back(std::move(s));
}

void MpiCore::send_request(int to, int32_t round) {
  auto s = std::make_unique<PendingSend>();
  s->round = round;
  if (MPI_Isend(&s->round, 1, MPI_INT32_T, to, kRequestTag, diag.get(), &s->req) == MPI_SUCCESS)
    sends_.push_back(std::move(s));
}

void MpiCore::service() {
  for (int i = 0; i < 64 && listen_ != MPI_REQUEST_NULL; ++i) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Test(&listen_, &flag, &status) != MPI_SUCCESS || !flag) break;
    send_reply(status.MPI_SOURCE, incoming_);
    post_listen();
  }
  std::erase_if(sends_, [](const std::unique_ptr<PendingSend>& s) {
    int done = 0;
    return MPI_Test(&s->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done;
  });
}

void MpiCore::progress_all() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (MpiCore* c : registry()) c->advance();
}

void MpiCore::register_core(bool add) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& r = registry();
  if (add)
    r.push_back(this);
  else
    std::erase(r, this);
}

bool MpiCore::diagnose(MpiWork& w, double waited_s) {
  const auto grace = std::min(options.diagnosis_grace, options.timeout);
  const int32_t round = ++round_;
  const int n = info.size, me = info.rank;
  std::vector<RankReport> reports(n);
  reports[me] = RankReport{true, activity(), book->recent()};
  std::vector<DiagReply> replies(n);
  std::vector<MPI_Request> recv(n, MPI_REQUEST_NULL);
  auto post = [&](int p) {
    MPI_Irecv(&replies[p], sizeof(DiagReply), MPI_BYTE, p, kReplyTag, diag.get(), &recv[p]);
  };
  for (int p = 0; p < n; ++p)
    if (p != me) {
      send_request(p, round);
      post(p);
    }
  auto cancel_all = [&] {
    for (MPI_Request& r : recv)
      if (r != MPI_REQUEST_NULL) MPI_Cancel(&r), MPI_Wait(&r, MPI_STATUS_IGNORE);
  };
  bool completed = false;
  const Clock::time_point deadline = Clock::now() + grace;
  try {
    for (int pending = n - 1; pending > 0 && Clock::now() < deadline;) {
      for (int p = 0; p < n; ++p) {
        int flag = 0;
        if (recv[p] == MPI_REQUEST_NULL) continue;
        if (MPI_Test(&recv[p], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) continue;
        if (replies[p].round != round) {  // a late answer to an earlier diagnosis
          post(p);
          continue;
        }
        reports[p] = decode(replies[p]);
        --pending;
      }
      progress_all();  // and answer others who diagnose at the same time
      if ((completed = w.test())) break;
      std::this_thread::sleep_for(200us);
    }
  } catch (...) {  // w failed meanwhile: its own error wins
    cancel_all();
    throw;
  }
  cancel_all();
  if (completed) return true;
  std::string hint;
  if (w.peer >= 0)
    hint = str(info.rank_name(w.peer), " has not posted the matching ",
               w.kind() == OpKind::kSend ? "recv" : "send", " (tag ", w.tag,
               "), or it is stuck: see its operations below");
  HangContext context{info, w.what, w.seq, waited_s, std::chrono::duration<double>(grace).count(),
                      hint};
  raise_hang(context, reports, __FILE__, __LINE__);
}

}  // namespace kiri::comm::detail
