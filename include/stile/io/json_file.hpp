#pragma once
// The small JSON files stile's tools write and read back (device profile, classification heads,
// importance profile): read whole with a size cap and the strict parser (io/strict_json.hpp);
// written to a temporary file beside the target, then renamed, so the target is either the
// complete new file or untouched. Errors name the file: "stile: <file>: cannot read <document>: ...".
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>

#include <nlohmann/json.hpp>

#include "stile/core/file_error.hpp"
#include "stile/io/strict_json.hpp"

namespace stile {

// `document` names the kind of file in messages, with its article: "the device profile".
inline nlohmann::json read_json_file(const std::filesystem::path& path, std::uintmax_t max_bytes, int max_depth,
                                     std::string_view document) {
  const std::string file = path.string();
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail_in_file(file, "cannot read ", document, ": ", ec.message());
  if (size > max_bytes) fail_in_file(file, "is ", size, " bytes, too large for ", document, " (limit ", max_bytes, ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_in_file(file, "cannot open ", document);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail_in_file(file, "cannot read ", document);
  return parse_strict_json(text, max_depth, file, document);
}

inline void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  const std::string file = path.string();
  std::filesystem::path temp = path;
  temp += concat(".tmp-", static_cast<long>(::getpid()));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) fail_in_file(file, "cannot create the temporary file ", temp.string());
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temp, ignored);
      fail_in_file(file, "cannot write the temporary file ", temp.string());
    }
  }
  // On disk before the rename: after a power cut the target is the old file or the whole new one,
  // never a renamed file whose bytes never reached the disk.
  if (const int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    fail_in_file(file, "cannot rename the temporary file ", temp.string(), " into place: ", ec.message());
  }
}

}  // namespace stile
