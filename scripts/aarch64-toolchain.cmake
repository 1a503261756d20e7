# CMake toolchain of the aarch64 cross build (scripts/determinism_aarch64.sh,
# docs/determinism.md): Debian's g++-aarch64-linux-gnu, arm64 libraries installed
# through multiarch (dpkg --add-architecture arm64; scripts/setup.sh), binaries run
# under qemu-user with the cross sysroot /usr/aarch64-linux-gnu.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
# pkg-config: the arm64 .pc files only (openblas, icu-uc, libxxhash, libzstd).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# Header-only packages (Boost headers, Eigen, nlohmann-json) are the host's: their
# CMake files carry no architecture-specific paths.
if(NOT DEFINED Boost_DIR AND EXISTS /usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0)
  set(Boost_DIR /usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 CACHE PATH "")
endif()
