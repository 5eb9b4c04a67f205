#pragma once
// "Did you mean ...?" for mistyped names (command-line options, config keys).
#include <optional>
#include <string>
#include <vector>

namespace kiri {

// The optimal-string-alignment distance: insertions, deletions, substitutions and swaps of
// two neighbours each cost 1 ("lrr" -> "lr" is 1, "mmeory" -> "memory" is 1).
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word`, if one is close enough to be a typo of it: at most 1 edit
// for words up to 5 characters, 2 up to 8, 3 beyond, and fewer than the candidate's own
// length (so "x" does not suggest "n"). Ties go to the earlier candidate.
std::optional<std::string> closest(const std::string& word,
                                   const std::vector<std::string>& candidates);

}  // namespace kiri
