#pragma once
// stile reports bad input and broken preconditions with one exception type whose message names
// what was wrong (the file, the tensor, the dimension), so a host can show it to its user as is.
#include <stdexcept>
#include <string>

namespace stile {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Checks a runtime precondition on values a caller passed in; cheap enough for every call.
inline void require(bool condition, const char* what) {
  if (!condition) throw Error(std::string("stile: ") + what);
}
inline void require(bool condition, const std::string& what) {
  if (!condition) throw Error("stile: " + what);
}

}  // namespace stile
