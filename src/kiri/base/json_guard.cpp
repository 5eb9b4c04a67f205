#include "kiri/base/json_guard.h"

#include <set>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiri {

using nlohmann::json;

namespace {

// Object keys per level, in a SAX pass (linear, and no DOM for hostile input).
class DuplicateKeys : public nlohmann::json_sax<json> {
 public:
  std::string duplicate;

  bool key(string_t& k) override {
    if (!levels_.empty() && levels_.back().is_object) {
      levels_.back().name = k;
      if (!levels_.back().seen.insert(k).second) {
        duplicate = path();
        return false;  // stop: one is enough
      }
    }
    return true;
  }
  bool start_object(std::size_t) override { return push(true); }
  bool end_object() override { return pop(); }
  bool start_array(std::size_t) override { return push(false); }
  bool end_array() override { return pop(); }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  struct Level {
    bool is_object;
    std::set<std::string> seen;
    std::string name;  // the current key (objects)
  };
  std::vector<Level> levels_;

  bool push(bool is_object) {
    levels_.push_back({is_object, {}, {}});
    return true;
  }
  bool pop() {
    if (!levels_.empty()) levels_.pop_back();
    return true;
  }
  std::string path() const {
    std::string out;
    for (const Level& l : levels_)
      if (l.is_object) out += (out.empty() ? "" : ".") + l.name;
    return out;
  }
};

}  // namespace

std::string json_duplicate_key(std::string_view text, bool ignore_comments) {
  DuplicateKeys sax;
  json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json, true,
                  ignore_comments);
  return sax.duplicate;
}

}  // namespace kiri
