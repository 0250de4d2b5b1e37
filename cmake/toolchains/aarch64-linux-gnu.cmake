# Cross-compiling for 64-bit Arm boards (Odroid, Raspberry Pi 4/5, Jetson CPUs) with Debian's
# g++-aarch64-linux-gnu and the arm64 multiarch -dev packages (dpkg --add-architecture arm64).
# Test programs run under qemu-user through CMAKE_CROSSCOMPILING_EMULATOR, so ctest works as is.
# The emulator loads the arm64 multiarch glibc (libc6:arm64 in /lib/aarch64-linux-gnu, pulled in
# by the arm64 -dev packages) with `-L /`: with the cross sysroot's copy (-L /usr/aarch64-linux-gnu)
# pthread_create spins forever under Debian bookworm's qemu-user 7.2.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/)
