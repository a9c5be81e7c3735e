# Sourced by scripts: the environment the Makefile exports, so `tch` finds the
# libtorch of the cached PyPI wheel and Python baselines find their packages.
ARL_CACHE=${ARL_CACHE:-$HOME/.cache/arl}
export ARL_CACHE
export LIBTORCH_USE_PYTORCH=1
export PATH="$ARL_CACHE/venv-torch-2.13.0/bin:$PATH"
export ARL_PYTHON="$ARL_CACHE/venv-torch-2.13.0/bin/python"
