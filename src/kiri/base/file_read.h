#pragma once
// Reading small files that come from users (configs, state.json, `latest`) without the
// ways an ifstream goes wrong on hostile input: a FIFO or device blocks open() forever,
// and a huge file is read whole into memory and then quoted whole in an error message.
#include <cstdint>
#include <string>
#include <string_view>

#include "kiri/base/error.h"

namespace kiri {

// Opens `path` for reading without blocking (O_NONBLOCK, so a FIFO cannot hang the open)
// and checks it is a regular file; returns the descriptor (the caller closes it).
// `what` names the file in messages ("config file", "checkpoint state"); a missing or
// unreadable file is kIo, a FIFO, device, socket or directory is `kind`.
int open_regular_file(const std::string& path, ErrorKind kind, const std::string& what);

// The whole file, at most `max_bytes` (a bigger file is a `kind` error naming both sizes).
std::string read_small_file(const std::string& path, uint64_t max_bytes, ErrorKind kind,
                            const std::string& what);

// At most `max_chars` of `text` for quoting in a message, with the length when cut.
std::string quote_bounded(std::string_view text, size_t max_chars = 200);

// The deepest nesting of arrays and objects in JSON `text`, counting no further than
// `stop_at` (a pre-scan, so a parser or dump() never recurses 100,000 levels deep).
// Brackets inside strings do not count.
int json_nesting_depth(std::string_view text, int stop_at);

}  // namespace kiri
