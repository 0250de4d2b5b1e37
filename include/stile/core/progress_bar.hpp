#pragma once
// A one-line progress bar on standard error for long-running tools (conversion, profiling,
// evaluation): "label [#######.......]  45%  27/60  3.1 s". Redrawn in place when stderr is a
// terminal; otherwise printed at every tenth, so logs stay short.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

#include <unistd.h>

namespace stile {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO) != 0) {}

  void update(std::size_t done, std::size_t total) {
    if (total == 0) return;
    const std::size_t tenth = done * 10 / total;
    if (!tty_ && tenth == last_tenth_ && done != total) return;
    last_tenth_ = tenth;
    constexpr std::size_t kWidth = 30;
    const std::size_t filled = done * kWidth / total;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "%s%s [%s%s] %3zu%%  %zu/%zu  %.1f s%s", tty_ ? "\r" : "", label_.c_str(),
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), done * 100 / total, done,
                 total, seconds, tty_ && done != total ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool tty_;
  std::size_t last_tenth_ = static_cast<std::size_t>(-1);
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace stile
