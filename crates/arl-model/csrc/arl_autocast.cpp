/*
 * libtorch autocast with a chosen lower-precision dtype, for arl-train's
 * `--precision amp` (src/model/amp.rs). Compiled by build.rs against the
 * headers of the libtorch that torch-sys links.
 *
 * Why a shim: tch's `autocast` only switches CUDA autocast on, in its default
 * dtype (float16), and torch-sys exposes neither the dtype nor the CPU
 * autocast. These functions are what `torch.autocast(device, dtype)` does on
 * entry and exit.
 *
 * No C++ exception crosses into Rust: every call catches and returns -1.
 */
#include <ATen/autocast_mode.h>

static at::DeviceType device_of(int device) { return device == 1 ? at::kCUDA : at::kCPU; }

extern "C" {

/* Enters an autocast region on `device` (0 CPU, 1 CUDA) with `dtype`
 * (0 bfloat16, 1 float16). Writes the previous (enabled, dtype) to
 * prev_enabled / prev_dtype for arl_autocast_exit. 0 on success. */
int arl_autocast_enter(int device, int dtype, int *prev_enabled, int *prev_dtype) {
  try {
    at::DeviceType d = device_of(device);
    *prev_enabled = at::autocast::is_autocast_enabled(d) ? 1 : 0;
    *prev_dtype = at::autocast::get_autocast_dtype(d) == at::kHalf ? 1 : 0;
    at::autocast::set_autocast_dtype(d, dtype == 1 ? at::kHalf : at::kBFloat16);
    at::autocast::set_autocast_enabled(d, true);
    at::autocast::increment_nesting();
    return 0;
  } catch (...) {
    return -1;
  }
}

/* Leaves the region: restores the previous state; the outermost exit drops
 * autocast's cache of lower-precision weight copies (stale after an
 * optimizer step). 0 on success. */
int arl_autocast_exit(int device, int prev_enabled, int prev_dtype) {
  try {
    at::DeviceType d = device_of(device);
    if (at::autocast::decrement_nesting() == 0) {
      at::autocast::clear_cache();
    }
    at::autocast::set_autocast_enabled(d, prev_enabled != 0);
    at::autocast::set_autocast_dtype(d, prev_dtype == 1 ? at::kHalf : at::kBFloat16);
    return 0;
  } catch (...) {
    return -1;
  }
}

/* 1 when autocast is on for `device`, 0 when off, -1 on error. */
int arl_autocast_is_enabled(int device) {
  try {
    return at::autocast::is_autocast_enabled(device_of(device)) ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
