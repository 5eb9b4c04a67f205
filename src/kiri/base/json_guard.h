#pragma once
// Guards for JSON that kiri reads without trusting it (config files, DeepSpeed configs,
// checkpoints' state.json): what nlohmann accepts silently.
#include <string>
#include <string_view>

namespace kiri {

// The first key that appears twice in one object of JSON `text`, as a dotted path
// ("train.lr"), or "" when none does or the text does not parse (the caller's parse
// reports that). nlohmann keeps the last of duplicates silently.
std::string json_duplicate_key(std::string_view text, bool ignore_comments);

}  // namespace kiri
