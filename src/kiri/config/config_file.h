#pragma once
// Reading a JSON config file without trusting it: kiri's config files (config_schema.h)
// and DeepSpeed's (deepspeed_config.h). `what` names the kind of file in messages
// ("config file", "DeepSpeed config").
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiri {

// The object a file's text holds: JSON with comments, no key twice in one object, nested
// at most 64 levels, no NUL byte; anything else is a kConfig error naming `where`.
nlohmann::json parse_config_json(std::string_view text, const std::string& where,
                                 const std::string& what = "config file");
// The text of a regular file (a FIFO or a directory is refused, never waited on) of at
// most 16 MiB.
std::string read_config_text(const std::string& file, const std::string& what = "config file");
// Both: the object in `file`.
nlohmann::json read_config_file(const std::string& file, const std::string& what = "config file");

}  // namespace kiri
