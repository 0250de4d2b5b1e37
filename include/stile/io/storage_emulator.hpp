#pragma once
// A board's flash modeled on top of a real read backend, so that the elastic pipeline can be
// measured against eMMC, SD or NVMe speeds on a development machine whose SSD (or page cache) is
// far faster.
//
// The bytes are real: they are read through the wrapped backend. Only their arrival is delayed,
// so that each request costs latency + bytes / bandwidth on one device channel. Requests queue
// behind each other as on a single flash device: a "busy until" time point, kept under a mutex,
// says when the device is free; a call's batch costs the sum of its requests and completes at
// max(now, busy until) + that sum. If the real read took longer than the model, there is no extra
// sleep (the model is a floor, never a discount). Results made this way say so: emulated() is
// true and describe() names the profile. Backends that share one EmulatedDevice queue on the same
// chip: an engine and a background reader of the same board's flash (bench/soak's
// --background-read-mbps), each slowed by the other as on one device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/read_backend.hpp"

namespace stile {

struct StorageProfile {
  std::string name;                  // "emmc", "sd", "nvme", "none"
  double bandwidth_bytes_per_s = 0;  // 0 = unlimited
  double latency_s = 0;              // per request
};

inline std::vector<std::string> storage_profile_names() { return {"emmc", "sd", "nvme", "none"}; }

inline StorageProfile storage_profile(std::string_view name) {
  // eMMC 5.1 as soldered on Odroid/Rock/Jetson-Nano-class boards: 80-150 MB/s sequential reads in
  // practice (HS200 bus, 200 MB/s at best); take the low end. Random 4 KiB reads at queue depth 1
  // run at ~3-4k IOPS on such parts, i.e. ~0.25-0.35 ms per command: 0.3 ms.
  if (name == "emmc") return {"emmc", 80e6, 0.3e-3};
  // A microSD card in a Raspberry Pi: the Pi 4's SD host runs DDR50, ~40-45 MB/s at best. An A1
  // card promises only 1500 random-read IOPS (0.67 ms) and cheaper cards do worse: 1 ms.
  if (name == "sd") return {"sd", 40e6, 1e-3};
  // A mid-range NVMe SSD (PCIe 3.0 x4) as on a Jetson Orin dev kit or an M.2-carrier board:
  // ~2 GB/s sequential; a QD1 4 KiB random read costs one NAND page read (tR ~50-80 us on TLC)
  // plus controller and driver overhead: 60 us.
  if (name == "nvme") return {"nvme", 2e9, 60e-6};
  if (name == "none") return {"none", 0, 0};
  std::string known;
  for (const std::string& n : storage_profile_names()) {
    if (!known.empty()) known += ", ";
    known += n;
  }
  throw Error(concat("stile: unknown storage profile '", name, "' (known: ", known, ")"));
}

// One emulated flash device: when it is next free. Shared (std::shared_ptr) by every backend
// that reads the same chip; a backend made without one has a device of its own.
class EmulatedDevice {
 public:
  using Clock = std::chrono::steady_clock;
  // Queues a command of `cost` behind those already queued; returns when it completes.
  Clock::time_point reserve(Clock::duration cost) {
    std::lock_guard lock(mutex_);
    busy_until_ = std::max(Clock::now(), busy_until_) + cost;
    return busy_until_;
  }

 private:
  std::mutex mutex_;
  Clock::time_point busy_until_{};
};

namespace storage_emulator_detail {

// "80 MB/s, 0.3 ms per request"; decimal MB, like the vendors' data sheets.
inline std::string describe_profile(const StorageProfile& p) {
  char bandwidth[48] = "unlimited bandwidth";
  if (p.bandwidth_bytes_per_s > 0) {
    std::snprintf(bandwidth, sizeof bandwidth, "%g MB/s", p.bandwidth_bytes_per_s / 1e6);
  }
  char latency[48];
  if (p.latency_s > 0 && p.latency_s < 1e-4) {  // "60 us", but "0.3 ms"
    std::snprintf(latency, sizeof latency, "%g us per request", p.latency_s * 1e6);
  } else {
    std::snprintf(latency, sizeof latency, "%g ms per request", p.latency_s * 1e3);
  }
  return concat(std::string_view(bandwidth), ", ", std::string_view(latency));
}

class EmulatedStorage final : public ReadBackend {
 public:
  using Clock = std::chrono::steady_clock;

  EmulatedStorage(std::unique_ptr<ReadBackend> inner, StorageProfile profile, std::shared_ptr<EmulatedDevice> device)
      : inner_(std::move(inner)), profile_(std::move(profile)), device_(std::move(device)) {}

  std::string describe() const override {
    return concat(inner_->describe(), " + ", profile_.name, " emulator (", describe_profile(profile_), ")");
  }
  std::uint64_t file_size() const noexcept override { return inner_->file_size(); }
  std::size_t alignment() const noexcept override { return inner_->alignment(); }
  bool bypasses_page_cache() const noexcept override { return inner_->bypasses_page_cache(); }
  bool emulated() const noexcept override { return true; }

  void read(std::span<const ReadRequest> requests, std::span<std::size_t> got) override {
    // Empty requests cost nothing: no command reaches a real device for them.
    double cost_s = 0;
    for (const ReadRequest& r : requests) {
      if (r.out.empty()) continue;
      cost_s += profile_.latency_s;
      if (profile_.bandwidth_bytes_per_s > 0) {
        cost_s += static_cast<double>(r.out.size()) / profile_.bandwidth_bytes_per_s;
      }
    }
    // Rounded up, so that the sleep is never shorter than the model.
    const auto cost = std::chrono::ceil<Clock::duration>(std::chrono::duration<double>(cost_s));
    const Clock::time_point done = device_->reserve(cost);
    inner_->read(requests, got);
    std::this_thread::sleep_until(done);
  }

 private:
  std::unique_ptr<ReadBackend> inner_;
  StorageProfile profile_;
  std::shared_ptr<EmulatedDevice> device_;
};

}  // namespace storage_emulator_detail

// Wraps `inner` so that its reads take at least the profile's time, queued on `device` (null: a
// device of its own); a profile without delay ("none") returns `inner` unchanged.
inline std::unique_ptr<ReadBackend> emulate_storage(std::unique_ptr<ReadBackend> inner, const StorageProfile& profile,
                                                    std::shared_ptr<EmulatedDevice> device = nullptr) {
  require(inner != nullptr, "emulate_storage needs a backend to wrap");
  require(std::isfinite(profile.bandwidth_bytes_per_s) && profile.bandwidth_bytes_per_s >= 0 &&
              std::isfinite(profile.latency_s) && profile.latency_s >= 0,
          concat("storage profile '", profile.name, "' needs a finite bandwidth and latency, both >= 0"));
  if (profile.bandwidth_bytes_per_s == 0 && profile.latency_s == 0) return inner;
  if (device == nullptr) device = std::make_shared<EmulatedDevice>();
  return std::make_unique<storage_emulator_detail::EmulatedStorage>(std::move(inner), profile, std::move(device));
}

}  // namespace stile
