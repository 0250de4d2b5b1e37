#pragma once
// The message of the stile::Error a piece of code throws, for tests of refusals.
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "stile/core/error.hpp"

namespace stile_test {

// The message of the stile::Error that f throws, if it throws one.
template <class F>
std::optional<std::string> thrown_error(F&& f) {
  try {
    f();
  } catch (const stile::Error& e) {
    return e.what();
  }
  return std::nullopt;
}

// The message of the stile::Error that f throws; when it throws none, the test fails here.
template <class F>
std::string error_of(F&& f) {
  const std::optional<std::string> message = thrown_error(f);
  if (!message) FAIL("expected a stile::Error, but nothing was thrown");
  return message.value_or("");
}

// The message of the stile::Error that f throws, or "(no error)" when it throws none: for tests
// that expect either.
template <class F>
std::string error_or_none(F&& f) {
  return thrown_error(f).value_or("(no error)");
}

}  // namespace stile_test
