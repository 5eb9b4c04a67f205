#include "kiri/data/io.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"

namespace kiri::data {

std::string read_file(const std::string& path, std::string_view what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    KIRI_RAISE(kData, what, " ", path, " does not exist or is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) KIRI_RAISE(kData, "cannot open ", what, " ", path, ": ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), size);
  if (in.gcount() != size)
    KIRI_RAISE(kData, "read ", in.gcount(), " of ", size, " bytes of ", what, " ", path);
  return bytes;
}

void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts) {
  kiri::write_file_atomic(path, [&](FileWriter& w) {
    for (std::string_view part : parts) w.write(part);
  });
}

}  // namespace kiri::data
