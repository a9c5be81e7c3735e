# shellcheck shell=bash
# Sourced by benchmark scripts: `llama_server` prints the path of a
# llama.cpp `llama-server` built from the llama-cpp-python 0.3.9 sdist that
# `make models` fetched (sha256-checked there), with native CPU flags
# (GGML_NATIVE: the instructions of the machine it is built on), building it
# the first time (about 5-10 minutes on 2 cores) into
# $ARL_CACHE/llama.cpp-0.3.9/ and rebuilding when the CPU model changed. cmake
# comes from PyPI into $ARL_CACHE/venv-cmake when it is not installed. Not
# built in tests. Progress goes to stderr.
llama_server() {
  local sdist=$ARL_CACHE/wheels/llama_cpp_python-0.3.9.tar.gz
  local root=$ARL_CACHE/llama.cpp-0.3.9 cmake
  local bin=$root/build/bin/llama-server stamp=$root/built-for
  local cpu
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
  if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$cpu" ]; then
    echo "$bin"
    return 0
  fi
  [ -f "$sdist" ] || { echo "llama.cpp: $sdist is missing (make models fetches it)" >&2; return 1; }
  cmake=$(command -v cmake || true)
  if [ -z "$cmake" ]; then
    cmake=$ARL_CACHE/venv-cmake/bin/cmake
    if [ ! -x "$cmake" ]; then
      echo "llama.cpp: installing cmake from PyPI into $ARL_CACHE/venv-cmake" >&2
      rm -rf "$ARL_CACHE/venv-cmake"
      "$ARL_PYTHON" -m venv "$ARL_CACHE/venv-cmake" >&2 &&
        "$ARL_CACHE/venv-cmake/bin/pip" install --quiet 'cmake==3.31.6' >&2 || return 1
    fi
  fi
  echo "llama.cpp: building llama-server with native CPU flags into $root (minutes)" >&2
  rm -rf "$root"
  mkdir -p "$root"
  tar xzf "$sdist" -C "$root" --strip-components=3 llama_cpp_python-0.3.9/vendor/llama.cpp || return 1
  "$cmake" -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >&2 || return 1
  "$cmake" --build "$root/build" --target llama-server -j "$(nproc)" >&2 || return 1
  echo "$cpu" >"$stamp"
  echo "$bin"
}
