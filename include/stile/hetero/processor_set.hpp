#pragma once
// Opens the processors a mapping file names (plan/mapping_file.hpp), for the mapped forward
// (hetero/mapped_forward.hpp):
//   cpu:N, cpu:A+B+...  a CPU cluster of one worker per core, pinned, on its own dispatcher thread
//                       (the op latency profile's processors are single cores: cpu:N);
//   opencl:N            the N-th OpenCL device (hetero/opencl_device.hpp); it takes one linear
//                       format, that of the linear nodes mapped to it (all must share it; fp32 when
//                       it has none).
// A processor this machine lacks (a core outside this process's CPUs, an OpenCL device that is
// not there or a build without OpenCL) is a stile::Error naming the file and the processor.
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

#include "stile/core/error.hpp"
#include "stile/hetero/cpu_cluster.hpp"
#include "stile/hetero/opencl_device.hpp"
#include "stile/hetero/processor.hpp"
#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/op_graph.hpp"
#include "stile/plan/schedule_emulator.hpp"

namespace stile {

struct ProcessorSet {
  std::vector<std::unique_ptr<Processor>> owned;
  std::vector<Processor*> pointers() const {
    std::vector<Processor*> p;
    for (const auto& o : owned) p.push_back(o.get());
    return p;
  }
};

// Whether this process may run on `core`.
inline bool core_available(int core) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return core >= 0 && unsigned(core) < std::thread::hardware_concurrency();
  return core >= 0 && core < CPU_SETSIZE && CPU_ISSET(core, &set);
#else
  return core >= 0 && unsigned(core) < std::thread::hardware_concurrency();
#endif
}

// The processors `names` of a mapping `m` of graph `g`, read from `file`.
inline ProcessorSet open_mapping_processors(const std::vector<std::string>& names, const OpGraph& g,
                                            const OpMapping& m, const std::string& file) {
  ProcessorSet set;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    const auto fail = [&](const std::string& why) {
      throw Error(concat("stile: ", file, ": processor '", name, "': ", why));
    };
    if (name.starts_with("cpu:")) {
      std::string list = name.substr(4);
      for (char& ch : list) {
        if (ch == '+') ch = ',';
      }
      std::vector<int> cores;
      try {
        cores = parse_core_list(list);
      } catch (const Error& e) {
        fail(concat("not cpu:N or cpu:A+B (", e.what(), ")"));
      }
      for (const int core : cores) {
        if (!core_available(core)) {
          fail(concat("this machine (or this process's CPU set) has no core ", core, " (", std::thread::hardware_concurrency(),
                      " cores)"));
        }
      }
      set.owned.push_back(std::make_unique<CpuCluster>(name, cores, LinearFormat::kF32));
    } else if (name.starts_with("opencl:")) {
      const std::string_view index = std::string_view(name).substr(7);
      if (index.empty() || index.size() > 3 || index.find_first_not_of("0123456789") != std::string_view::npos) {
        fail("not opencl:N");
      }
      // The one linear format of its nodes.
      bool have = false;
      LinearFormat format = LinearFormat::kF32;
      for (std::size_t n = 0; n < g.size(); ++n) {
        if (!is_linear(g.nodes[n].kind) || m.processor[n] != i) continue;
        const LinearFormat f = linear_format_of(m.format[n]);
        if (have && f != format) {
          fail(concat("an OpenCL device takes one linear format; its nodes have ", to_string(format), " and ",
                      to_string(f), " (", g.nodes[n].name, ")"));
        }
        format = f, have = true;
      }
      try {
        set.owned.push_back(OpenClDevice::open(std::stoul(std::string(index)), format, name));
      } catch (const Error& e) {
        fail(e.what());
      }
    } else {
      fail("unknown processor (cpu:N, cpu:A+B or opencl:N)");
    }
  }
  return set;
}

}  // namespace stile
