#pragma once
// The preload buffer: shard versions kept in memory between requests, so a cold request's first
// layers start computing at once instead of waiting for storage. Its byte budget may change at any
// time; shrinking it evicts from the top layers down (the first layers are the ones whose loading
// nothing can hide). Which shards it should hold is the planner's call (preload_set below); the
// engine fills it from the reads a request makes anyway, so filling costs no extra IO.
#include <algorithm>
#include <compare>
#include <cstddef>
#include <iterator>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/store/shard_view.hpp"
#include "stile/model/submodel.hpp"

namespace stile {

class PreloadBuffer {
 public:
  using Bytes = AlignedBuffer<std::byte, 4096>;

  explicit PreloadBuffer(std::size_t budget_bytes = 0) : budget_(budget_bytes) {}

  std::size_t budget_bytes() const noexcept { return budget_; }
  std::size_t held_bytes() const noexcept { return held_; }
  std::size_t size() const noexcept { return entries_.size(); }

  // Sets the budget and evicts, from the top layer down (the last shard of a layer first), until
  // what is held fits. Returns how many versions were evicted.
  std::size_t set_budget(std::size_t budget_bytes) {
    budget_ = budget_bytes;
    std::size_t evicted = 0;
    while (held_ > budget_ && !entries_.empty()) {
      erase(std::prev(entries_.end()));
      ++evicted;
    }
    return evicted;
  }

  // The view of a held version, or null.
  const ShardView* find(const ShardKey& key) const {
    const auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second.view;
  }
  bool contains(const ShardKey& key) const { return entries_.count(key) != 0; }

  // Keeps a copy of a version's `bytes` (size_bytes of them count against the budget) with its
  // view re-pointed by `view_into` (a function of the new bytes). False, nothing kept, when it
  // does not fit. During a request (begin_request) the versions it will drop at its end do not
  // count.
  template <class ViewInto>
  bool insert(const ShardKey& key, std::span<const std::byte> bytes, ViewInto&& view_into) {
    if (contains(key)) return true;
    if (held_ - leaving_ + bytes.size() > budget_) return false;
    Entry e;
    e.bytes.resize(bytes.size());
    std::copy(bytes.begin(), bytes.end(), e.bytes.data());
    e.view = view_into(std::span<const std::byte>(e.bytes.data(), bytes.size()));
    held_ += bytes.size();
    entries_.emplace(key, std::move(e));
    return true;
  }

  // Evicts every version not in `keep`.
  void retain_only(const std::set<ShardKey>& keep) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = keep.count(it->first) != 0 ? std::next(it) : erase(it);
    }
    leaving_ = 0;
  }

  // A request that will leave the buffer holding `keep` (within the budget) and computes on
  // the held versions in `in_use`: evicts what is in neither now. The held versions in use but
  // not kept stay until end_request() (the request's layers still read them), and do not count
  // against the budget meanwhile, so that the versions to keep that the request reads fit: while
  // a request runs the buffer may hold its budget plus those leaving versions. Without this a
  // buffer full of the previous request's versions refused the new ones and ended the request
  // holding less than its plan assumed (the next request then read versions it was planned not to).
  void begin_request(const std::set<ShardKey>& keep, const std::set<ShardKey>& in_use) {
    leaving_ = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (keep.count(it->first) != 0) {
        ++it;
      } else if (in_use.count(it->first) != 0) {
        leaving_ += it->second.bytes.size();
        ++it;
      } else {
        it = erase(it);
      }
    }
  }
  void end_request(const std::set<ShardKey>& keep) { retain_only(keep); }

  std::vector<ShardKey> keys() const {
    std::vector<ShardKey> k;
    for (const auto& [key, entry] : entries_) k.push_back(key);
    return k;
  }

 private:
  struct Entry {
    Bytes bytes;
    ShardView view;  // points into bytes (heap memory: stays valid when the entry moves)
  };
  using Map = std::map<ShardKey, Entry>;  // ordered by layer, then shard: eviction takes the back

  Map::iterator erase(Map::iterator it) {
    held_ -= it->second.bytes.size();
    return entries_.erase(it);
  }

  std::size_t budget_;
  std::size_t held_ = 0;
  std::size_t leaving_ = 0;  // bytes held that the running request drops at its end
  Map entries_;
};

// The versions a plan wants preloaded under a budget: its shards in layer order (each layer's in
// plan order), as many from the start as fit. `bytes_of` gives a version's size.
template <class BytesOf>
std::set<ShardKey> preload_set(const SubmodelPlan& plan, std::size_t budget_bytes, BytesOf&& bytes_of) {
  std::set<ShardKey> set;
  std::size_t used = 0;
  for (std::size_t l = 0; l < plan.layers.size(); ++l) {
    for (const ShardChoice& c : plan.layers[l]) {
      const ShardKey key{l, c.shard, c.bits};
      const std::size_t bytes = bytes_of(key);
      if (used + bytes > budget_bytes) return set;
      used += bytes;
      set.insert(key);
    }
  }
  return set;
}

}  // namespace stile
