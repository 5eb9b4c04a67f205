#include "kiri/comm/diagnosis.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include "kiri/comm/hang_error.h"

namespace kiri::comm::detail {
namespace {

// Ranks grouped by what they did; the largest class first (ties: lowest rank first).
template <typename T, typename Same>
std::vector<std::vector<int>> classes(const std::vector<std::optional<T>>& items, Same same) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < static_cast<int>(items.size()); ++r) {
    if (!items[r]) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const std::vector<int>& c) {
      return same(*items[c[0]], *items[r]);
    });
    if (it == out.end())
      out.push_back({r});
    else
      it->push_back(r);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

const char* const kOutside =
    "not inside any communication call (computing, or stuck outside communication)";

bool is_collective(const OpRecord& r) {
  return r.kind != OpKind::kSend && r.kind != OpKind::kRecv;
}

bool same_record(const OpRecord& a, const OpRecord& b) {
  return a.kind == b.kind && a.bytes == b.bytes && a.peer == b.peer;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

// The first seq at which the answered rings disagree, named by majority vote.
std::string first_divergence(const GroupInfo& g, const std::vector<RankReport>& reports) {
  std::map<uint64_t, std::vector<std::optional<OpRecord>>> by_seq;
  const size_t n = reports.size();
  for (size_t r = 0; r < n; ++r)
    for (const OpRecord& op : reports[r].ring)
      if (reports[r].answered && is_collective(op)) {
        auto& row = by_seq[op.seq];
        row.resize(n);
        row[r] = op;
      }
  for (const auto& [seq, row] : by_seq) {
    auto cls = classes(row, same_record);
    if (cls.size() < 2) continue;
    std::string s = str("the recent operations diverge first at #", seq, ": ");
    for (size_t c = 1; c < cls.size(); ++c)
      s += str(g.ranks_list(cls[c]), " called ", describe(*row[cls[c][0]]), "; ");
    return s + str(g.ranks_list(cls[0]), " called ", describe(*row[cls[0][0]]));
  }
  return "";
}

uint64_t last_collective(const RankReport& r) {
  uint64_t last = 0;
  for (const OpRecord& op : r.ring)
    if (is_collective(op)) last = std::max(last, op.seq);
  return last;
}

std::string rank_line(const GroupInfo& g, int r, const RankReport& rep, double grace_s) {
  std::string s = str("  ", g.rank_name(r), ": ");
  if (!rep.answered)
    return s + str("missing: dead, or stuck outside communication (no answer within ",
                   seconds(grace_s), ")");
  s += rep.activity.empty() ? kOutside : rep.activity;
  const size_t show = std::min<size_t>(rep.ring.size(), 4);
  s += "; last ops:";
  if (show == 0) s += " none";
  for (size_t i = rep.ring.size() - show; i < rep.ring.size(); ++i)
    s += (i + show == rep.ring.size() ? " " : ", ") + describe(rep.ring[i]);
  return s;
}

}  // namespace

std::string mismatch_message(const GroupInfo& g, const std::vector<Signature>& sigs) {
  std::vector<std::optional<Signature>> items(sigs.begin(), sigs.end());
  auto cls = classes(items, same_op);
  if (cls.size() < 2) return "";
  std::string s = str("collective #", sigs[g.rank].seq, " on ", g.name,
                      " does not match across its ", g.size, " ranks: ");
  if (g.size == 2)
    return s + str("rank 0 called ", describe(sigs[0]), ", rank 1 called ", describe(sigs[1]));
  // The reference is the majority, or without one the class of rank 0.
  const bool majority = cls[0].size() > cls[1].size();
  size_t ref = 0;
  for (size_t c = 0; c < cls.size() && !majority; ++c)
    if (cls[c][0] == 0) ref = c;
  int first = g.size;
  for (size_t c = 0; c < cls.size(); ++c)
    if (c != ref) first = std::min(first, cls[c][0]);
  s += str("first divergent rank: ", g.rank_name(first), ". ");
  for (size_t c = 0; c < cls.size(); ++c)
    if (c != ref) s += str(g.ranks_list(cls[c]), " called ", describe(sigs[cls[c][0]]), "; ");
  s += str(g.ranks_list(cls[ref]), " called ", describe(sigs[cls[ref][0]]));
  return s + (majority ? " (the majority)" : " (no majority)");
}

std::string diagnose_hang(const HangContext& c, const std::vector<RankReport>& reports) {
  const GroupInfo& g = c.group;
  std::vector<int> missing, late;
  for (int r = 0; r < static_cast<int>(reports.size()); ++r) {
    const RankReport& rep = reports[r];
    if (!rep.answered)
      missing.push_back(r);
    else if (c.seq > 0 && last_collective(rep) < c.seq)
      late.push_back(r);
  }
  std::string cause = first_divergence(g, reports);
  if (cause.empty() && !missing.empty())
    cause = str(g.ranks_list(missing), (missing.size() == 1 ? " is" : " are"),
                " missing: dead, or stuck outside communication");
  if (cause.empty() && !late.empty()) {
    const std::string& act = reports[late[0]].activity;
    cause = str(g.ranks_list(late), " never reached ", c.op, " (", g.rank_name(late[0]), ": ",
                act.empty() ? kOutside : act, ")");
  }
  if (cause.empty()) cause = c.hint;
  if (cause.empty()) cause = "every rank that answered has started it";
  std::string s = str(c.op, " ", g.where(), " did not complete within ", seconds(c.waited_s),
                      ". Likely cause: ", cause, ".\nRanks (oldest op first):");
  for (int r = 0; r < static_cast<int>(reports.size()); ++r)
    s += "\n" + rank_line(g, r, reports[r], c.grace_s);
  return s;
}

void raise_hang(const HangContext& c, const std::vector<RankReport>& reports, const char* file,
                int line) {
  std::vector<int> missing;
  for (size_t r = 0; r < reports.size(); ++r)
    if (!reports[r].answered && r < c.group.world_ranks.size())
      missing.push_back(c.group.world_ranks[r]);
  std::sort(missing.begin(), missing.end());
  throw HangError(diagnose_hang(c, reports), std::move(missing), file, line);
}

}  // namespace kiri::comm::detail
