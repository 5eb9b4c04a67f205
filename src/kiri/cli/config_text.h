#pragma once
// Reading a config file's text: a bounded regular file holding JSON with comments.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiri::cli {

// The object a config file's text holds: JSON with comments, no key twice in one
// object, nested at most 64 levels; anything else is kConfig naming `where`.
nlohmann::json parse_config_json(std::string_view text, const std::string& where);
// The file's text: a regular file (a FIFO or a directory is refused, never waited on)
// of at most 16 MiB; kConfig otherwise.
std::string read_config_text(const std::string& file);
nlohmann::json read_config_file(const std::string& file);

}  // namespace kiri::cli
