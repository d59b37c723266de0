# Sourced by scripts/build.sh and scripts/sanitize.sh: compile through ccache (Debian package) when it is
# installed. Paths under the repository root are hashed relative to it (CCACHE_BASEDIR), so two clones of the
# same tree share cached objects; the cache lives in ~/.cache/ccache (CCACHE_DIR to move it), at most 5 GB.
CCACHE_CMAKE_ARGS=()
if command -v ccache >/dev/null 2>&1 && [ "${KVSIEVE_NO_CCACHE:-0}" != 1 ]; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  CCACHE_CMAKE_ARGS=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
