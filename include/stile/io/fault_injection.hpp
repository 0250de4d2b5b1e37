#pragma once
// A read backend that injects faults into the reads of the backend it wraps (as the storage
// emulator wraps one, io/storage_emulator.hpp), so that what the engine does when storage fails
// can be tested and soaked: an I/O error (EIO), a short read, a late read, corrupted bytes.
//
// Reads are counted one per non-empty ReadRequest, from 1, over the injector's life. A rule fires
// on the n-th read or on each read with a probability (a seeded splitmix64 stream: the same
// script over the same reads injects the same faults). What each fault does to the read it hits:
//   eio      the backend call throws std::system_error(EIO), as a failing device does
//   short    got[i] is cut to half the request (rounded down to the alignment): the caller sees
//            the file end early
//   late     the call returns late: (x - 1) times the inner read's own duration more (x drawn in
//            [x_lo, x_hi], 10-100 by default: a spike of 10-100x the device's time), at least ms
//   corrupt  one bit flipped in every 64th byte of the request from a seeded phase: any checked
//            range of 64 bytes or more holds a flipped bit, so a checksum must catch it
//
// Scripts (tests, `run --inject`, the soak command) are text, parsed by parse_fault_script:
//   "seed=7; eio@n=12; short@p=0.01; late@p=0.02,x=10-100; corrupt@n=40; late@n=3,ms=50"
// Items are separated by ';'; each rule is KIND@PARAM[,PARAM...] with exactly one of n= (a read
// number, >= 1) or p= (a probability in [0, 1]); late also takes x= (a factor or a range LO-HI,
// 1..1000) and ms= (a least delay, 0..60000). Errors name the item and what is wrong.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/read_backend.hpp"

namespace stile {

enum class FaultKind { eio, short_read, late, corrupt };

inline std::string_view to_string(FaultKind kind) {
  switch (kind) {
    case FaultKind::eio: return "eio";
    case FaultKind::short_read: return "short";
    case FaultKind::late: return "late";
    case FaultKind::corrupt: return "corrupt";
  }
  return "unknown";
}

struct FaultRule {
  FaultKind kind = FaultKind::eio;
  std::uint64_t nth = 0;     // fires on this read (1-based); 0: by probability
  double probability = 0;    // with nth == 0: the chance per read
  double factor_lo = 10;     // late: the spike's factor over the inner read's duration, drawn in [lo, hi]
  double factor_hi = 100;
  double min_delay_ms = 0;   // late: at least this much later
};

struct FaultScript {
  std::uint64_t seed = 1;
  std::vector<FaultRule> rules;
};

// One fault as injected, for the caller's account (the soak command's causes, the tests).
struct InjectedFault {
  std::uint64_t read = 0;  // the read's number
  FaultKind kind = FaultKind::eio;
  std::uint64_t offset = 0;  // the read's offset in the file
  std::size_t bytes = 0;     // its size
  double delay_ms = 0;       // late: the delay added
};

namespace fault_detail {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

[[noreturn]] inline void bad(std::string_view item, std::string_view problem) {
  throw Error(concat("stile: fault script: '", item, "': ", problem));
}

inline std::uint64_t parse_count(std::string_view item, std::string_view v, std::string_view what) {
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty()) bad(item, concat(what, " needs a whole number"));
  return n;
}

inline double parse_real(std::string_view item, std::string_view v, std::string_view what, double lo, double hi) {
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty()) bad(item, concat(what, " needs a number"));
  if (!(x >= lo && x <= hi)) bad(item, concat(what, " must be in [", float_text(static_cast<float>(lo)), ", ",
                                              float_text(static_cast<float>(hi)), "]"));
  return x;
}

inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace fault_detail

// Parses a fault script (grammar above). Throws stile::Error naming the bad item.
inline FaultScript parse_fault_script(std::string_view text) {
  namespace d = fault_detail;
  FaultScript script;
  while (!text.empty()) {
    const std::size_t semi = text.find(';');
    const std::string_view item = d::trim(text.substr(0, semi));
    text = semi == std::string_view::npos ? std::string_view() : text.substr(semi + 1);
    if (item.empty()) continue;
    if (item.starts_with("seed=")) {
      script.seed = d::parse_count(item, item.substr(5), "seed=");
      continue;
    }
    const std::size_t at = item.find('@');
    if (at == std::string_view::npos) d::bad(item, "expected KIND@PARAMS or seed=N");
    const std::string_view kind = item.substr(0, at);
    FaultRule rule;
    if (kind == "eio") {
      rule.kind = FaultKind::eio;
    } else if (kind == "short") {
      rule.kind = FaultKind::short_read;
    } else if (kind == "late") {
      rule.kind = FaultKind::late;
    } else if (kind == "corrupt") {
      rule.kind = FaultKind::corrupt;
    } else {
      d::bad(item, "unknown fault kind (known: eio, short, late, corrupt)");
    }
    bool by_n = false, by_p = false;
    std::string_view params = item.substr(at + 1);
    while (!params.empty()) {
      const std::size_t comma = params.find(',');
      const std::string_view p = d::trim(params.substr(0, comma));
      params = comma == std::string_view::npos ? std::string_view() : params.substr(comma + 1);
      if (p.starts_with("n=")) {
        rule.nth = d::parse_count(item, p.substr(2), "n=");
        if (rule.nth == 0) d::bad(item, "n= counts reads from 1");
        by_n = true;
      } else if (p.starts_with("p=")) {
        rule.probability = d::parse_real(item, p.substr(2), "p=", 0, 1);
        by_p = true;
      } else if (p.starts_with("x=") && rule.kind == FaultKind::late) {
        const std::string_view v = p.substr(2);
        const std::size_t dash = v.find('-');
        rule.factor_lo = d::parse_real(item, v.substr(0, dash), "x=", 1, 1000);
        rule.factor_hi = dash == std::string_view::npos ? rule.factor_lo
                                                        : d::parse_real(item, v.substr(dash + 1), "x=", 1, 1000);
        if (rule.factor_hi < rule.factor_lo) d::bad(item, "x=LO-HI needs LO <= HI");
      } else if (p.starts_with("ms=") && rule.kind == FaultKind::late) {
        rule.min_delay_ms = d::parse_real(item, p.substr(3), "ms=", 0, 60000);
      } else {
        d::bad(item, concat("unknown parameter '", p, "' (n=, p=; late also x=, ms=)"));
      }
    }
    if (by_n == by_p) d::bad(item, "needs exactly one of n= and p=");
    script.rules.push_back(rule);
  }
  return script;
}

// The rules and their state, shared by the backend that injects and whoever scripts it (a test
// adds a rule for "the next read" between requests). Thread-safe.
class FaultInjector {
 public:
  explicit FaultInjector(FaultScript script = {}) : rules_(std::move(script.rules)), rng_(script.seed) {}

  void add(const FaultRule& rule) {
    std::lock_guard lock(mutex_);
    rules_.push_back(rule);
  }
  void clear() {
    std::lock_guard lock(mutex_);
    rules_.clear();
  }
  // Reads seen so far (the next read is reads() + 1).
  std::uint64_t reads() const {
    std::lock_guard lock(mutex_);
    return reads_;
  }
  std::vector<InjectedFault> log() const {
    std::lock_guard lock(mutex_);
    return log_;
  }

  // What to do to one call's reads; called by the backend before the inner read.
  struct Decision {
    bool eio = false;
    double delay_factor = 1, min_delay_ms = 0;
    std::vector<std::size_t> short_reads, corrupt;  // request indices
    std::uint64_t phase = 0;                        // corrupt: where the flips start (mod 64)
    std::vector<std::size_t> log_late;              // log_ entries to complete with the delay
  };
  Decision decide(std::span<const ReadRequest> requests) {
    std::lock_guard lock(mutex_);
    Decision d;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (requests[i].out.empty()) continue;
      const std::uint64_t n = ++reads_;
      for (const FaultRule& r : rules_) {
        const bool fires = r.nth != 0 ? r.nth == n : unit() < r.probability;
        if (!fires) continue;
        log_.push_back({n, r.kind, requests[i].offset, requests[i].out.size(), 0});
        switch (r.kind) {
          case FaultKind::eio: d.eio = true; break;
          case FaultKind::short_read: d.short_reads.push_back(i); break;
          case FaultKind::corrupt: d.corrupt.push_back(i); break;
          case FaultKind::late: {
            const double x = r.factor_lo + (r.factor_hi - r.factor_lo) * unit();
            d.delay_factor = std::max(d.delay_factor, x);
            d.min_delay_ms = std::max(d.min_delay_ms, r.min_delay_ms);
            d.log_late.push_back(log_.size() - 1);
            break;
          }
        }
      }
    }
    d.phase = fault_detail::splitmix64(rng_) % 64;
    return d;
  }
  void record_delay(const Decision& d, double delay_ms) {
    std::lock_guard lock(mutex_);
    for (const std::size_t i : d.log_late) log_[i].delay_ms = delay_ms;
  }

 private:
  double unit() { return static_cast<double>(fault_detail::splitmix64(rng_) >> 11) * 0x1p-53; }

  mutable std::mutex mutex_;
  std::vector<FaultRule> rules_;
  std::uint64_t rng_;
  std::uint64_t reads_ = 0;
  std::vector<InjectedFault> log_;
};

namespace fault_detail {

class FaultInjectingBackend final : public ReadBackend {
 public:
  using Clock = std::chrono::steady_clock;

  FaultInjectingBackend(std::unique_ptr<ReadBackend> inner, std::shared_ptr<FaultInjector> faults)
      : inner_(std::move(inner)), faults_(std::move(faults)) {}

  std::string describe() const override { return concat(inner_->describe(), " + fault injection"); }
  std::uint64_t file_size() const noexcept override { return inner_->file_size(); }
  std::size_t alignment() const noexcept override { return inner_->alignment(); }
  bool bypasses_page_cache() const noexcept override { return inner_->bypasses_page_cache(); }
  bool emulated() const noexcept override { return inner_->emulated(); }

  void read(std::span<const ReadRequest> requests, std::span<std::size_t> got) override {
    const FaultInjector::Decision d = faults_->decide(requests);
    const Clock::time_point start = Clock::now();
    inner_->read(requests, got);
    if (!d.log_late.empty()) {
      const double took_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      const double delay_ms = std::max(d.min_delay_ms, (d.delay_factor - 1) * took_ms);
      faults_->record_delay(d, delay_ms);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
    }
    // After the inner read, as a device fails: the caller's buffers were written.
    if (d.eio) throw std::system_error(EIO, std::system_category(), "injected fault");
    const std::size_t a = alignment();
    for (const std::size_t i : d.short_reads) got[i] = std::min(got[i], requests[i].out.size() / 2 / a * a);
    for (const std::size_t i : d.corrupt) {
      std::span<std::byte> out = requests[i].out;
      for (std::size_t b = d.phase; b < out.size(); b += 64) out[b] ^= std::byte{0x10};
    }
  }

 private:
  std::unique_ptr<ReadBackend> inner_;
  std::shared_ptr<FaultInjector> faults_;
};

}  // namespace fault_detail

// Wraps `inner` so that `faults` decides what goes wrong with its reads; null `faults` returns
// `inner` unchanged.
inline std::unique_ptr<ReadBackend> inject_faults(std::unique_ptr<ReadBackend> inner,
                                                  std::shared_ptr<FaultInjector> faults) {
  require(inner != nullptr, "inject_faults needs a backend to wrap");
  if (faults == nullptr) return inner;
  return std::make_unique<fault_detail::FaultInjectingBackend>(std::move(inner), std::move(faults));
}

}  // namespace stile
