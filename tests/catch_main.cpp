// Catch2 v2's main, compiled here instead of linking Debian's prebuilt libCatch2WithMain.a:
// that archive exists for one architecture at a time (catch2:amd64 and catch2:arm64 cannot be
// co-installed), and the aarch64 cross build needs one of its own.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
