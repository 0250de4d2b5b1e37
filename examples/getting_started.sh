#!/bin/sh
# The README's first two commands (scripts/check_readme.py checks that it shows them as here).
scripts/run    # set up, build, embed with stile on the default model, shard and quantize it, run it through the elastic engine
scripts/test   # set up, build everything (Release, -Werror), run all tests (native, aarch64 under qemu, sanitizers, fuzz)
