#!/bin/sh
# The README's first two commands (scripts/check_readme.py checks that it shows them as here).
scripts/run    # set up, build, embed with stile on the default model, shard and quantize it, run it through the elastic engine
scripts/test   # set up, build the library (Release, -Werror) and its tests, run them (native, aarch64 under qemu, sanitizers, fuzz)
