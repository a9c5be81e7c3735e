//! Automatic mixed precision through libtorch's autocast, in bfloat16 (or
//! float16), on CUDA and on the CPU: `arl-train --precision amp`. The
//! weights, the optimizer and the residual stream stay in float32; inside an
//! [`Autocast`] region libtorch runs the matrix multiplies (linear layers,
//! attention) in the lower precision and keeps reductions, norms and the loss
//! in float32 — what `torch.autocast(device, dtype=torch.bfloat16)` does.
//!
//! tch only offers CUDA autocast in float16, so the switch is a small C++
//! shim (`csrc/arl_autocast.cpp`, compiled by build.rs against libtorch's
//! headers). A region is entered per forward pass and left after it: on the
//! outermost exit libtorch drops its cache of lower-precision weight copies,
//! which an optimizer step would make stale.
use anyhow::{bail, Result};
use std::os::raw::c_int;
use tch::Device;

extern "C" {
    fn arl_autocast_enter(device: c_int, dtype: c_int, prev_enabled: *mut c_int, prev_dtype: *mut c_int) -> c_int;
    fn arl_autocast_exit(device: c_int, prev_enabled: c_int, prev_dtype: c_int) -> c_int;
    fn arl_autocast_is_enabled(device: c_int) -> c_int;
}

/// The lower precision of an autocast region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmpDtype {
    Bf16,
    Fp16,
}

fn device_code(d: Device) -> c_int {
    match d {
        Device::Cuda(_) => 1,
        _ => 0,
    }
}

/// An autocast region on one device type; left when dropped.
#[must_use = "autocast is on only while the guard lives"]
pub struct Autocast {
    device: c_int,
    prev_enabled: c_int,
    prev_dtype: c_int,
}

impl Autocast {
    pub fn enter(device: Device, dtype: AmpDtype) -> Result<Autocast> {
        if !matches!(device, Device::Cpu | Device::Cuda(_)) {
            bail!("autocast is available on cpu and cuda only, not {device:?}");
        }
        let code = device_code(device);
        let dt = match dtype {
            AmpDtype::Bf16 => 0,
            AmpDtype::Fp16 => 1,
        };
        let (mut pe, mut pd) = (0, 0);
        // SAFETY: plain C ints; the shim catches every C++ exception.
        if unsafe { arl_autocast_enter(code, dt, &mut pe, &mut pd) } != 0 {
            bail!("libtorch refused to enable autocast ({dtype:?}) on {device:?}");
        }
        Ok(Autocast { device: code, prev_enabled: pe, prev_dtype: pd })
    }
}

impl Drop for Autocast {
    fn drop(&mut self) {
        // SAFETY: as above. A failure to leave cannot be reported from drop;
        // it would only keep autocast on, which `is_enabled` shows.
        let _ = unsafe { arl_autocast_exit(self.device, self.prev_enabled, self.prev_dtype) };
    }
}

/// Whether autocast is on for `device`'s type in this thread.
pub fn is_enabled(device: Device) -> bool {
    // SAFETY: as above.
    unsafe { arl_autocast_is_enabled(device_code(device)) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Kind, Tensor};

    #[test]
    fn matmuls_run_in_bf16_inside_and_float32_after() {
        let a = Tensor::randn([4, 8], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([3, 8], (Kind::Float, Device::Cpu));
        assert!(!is_enabled(Device::Cpu));
        {
            let _g = Autocast::enter(Device::Cpu, AmpDtype::Bf16).unwrap();
            assert!(is_enabled(Device::Cpu));
            assert_eq!(a.linear::<Tensor>(&w, None).kind(), Kind::BFloat16);
            // Elementwise ops are not autocast ops.
            assert_eq!((&a * 2.0).kind(), Kind::Float);
            {
                let _inner = Autocast::enter(Device::Cpu, AmpDtype::Bf16).unwrap();
            }
            assert!(is_enabled(Device::Cpu), "an inner region's exit leaves the outer one on");
        }
        assert!(!is_enabled(Device::Cpu));
        assert_eq!(a.linear::<Tensor>(&w, None).kind(), Kind::Float);
    }
}
