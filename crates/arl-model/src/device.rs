//! `--device` of `arl-train` and `arl-serve`: parsed on the command line
//! (before any model is opened), resolved to a libtorch device when the run
//! starts.
use anyhow::Result;
use std::os::raw::c_int;
use tch::Device;

/// A device as the user named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// CUDA device 0 when CUDA is available, else the CPU.
    Auto,
    Cpu,
    /// `cuda`: device 0, or under a launcher the rank's local device.
    Cuda,
    /// `cuda:N`.
    CudaN(usize),
}

impl DeviceSpec {
    /// `auto`, `cpu`, `cuda` or `cuda:N`.
    pub fn parse(s: &str) -> Result<DeviceSpec, String> {
        match s {
            "auto" => Ok(DeviceSpec::Auto),
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda),
            _ => match s.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()) {
                Some(n) => Ok(DeviceSpec::CudaN(n)),
                None => Err(format!("`--device {s}`: expected auto, cpu, cuda or cuda:N")),
            },
        }
    }

    /// The libtorch device; `local_rank` is the rank's index on its machine
    /// under a launcher (`cuda` then means `cuda:LOCAL_RANK`). A CUDA device
    /// that does not exist is an error naming how many there are.
    pub fn resolve(self, local_rank: Option<usize>) -> Result<Device> {
        let n = match self {
            DeviceSpec::Cpu => return Ok(Device::Cpu),
            DeviceSpec::Auto => return Ok(Device::cuda_if_available()),
            DeviceSpec::Cuda => local_rank.unwrap_or(0),
            DeviceSpec::CudaN(n) => n,
        };
        let have = if tch::Cuda::is_available() { tch::Cuda::device_count().max(0) as usize } else { 0 };
        if n >= have {
            anyhow::bail!("`--device`: no CUDA device {n} (found {have})");
        }
        Ok(Device::Cuda(n))
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda => f.write_str("cuda"),
            DeviceSpec::CudaN(n) => write!(f, "cuda:{n}"),
        }
    }
}

extern "C" {
    fn arl_cuda_memory_peak(index: c_int, allocated: *mut i64, reserved: *mut i64) -> c_int;
}

/// The CUDA caching allocator's peak on a device, in bytes, since the
/// process started: what
/// `torch.cuda.max_memory_allocated` and `max_memory_reserved` report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPeak {
    /// Held by tensors.
    pub allocated: u64,
    /// Held by the allocator's cache (allocated, plus free blocks it keeps).
    pub reserved: u64,
}

/// The peak on `device`; `None` on the CPU (which has no such allocator:
/// see the process's peak RSS) or where libtorch refuses.
pub fn memory_peak(device: Device) -> Option<MemoryPeak> {
    let Device::Cuda(i) = device else { return None };
    let (mut allocated, mut reserved) = (0i64, 0i64);
    // SAFETY: the shim writes the two integers and catches every C++ exception.
    let rc = unsafe { arl_cuda_memory_peak(i as c_int, &mut allocated, &mut reserved) };
    (rc == 0).then(|| MemoryPeak { allocated: allocated.max(0) as u64, reserved: reserved.max(0) as u64 })
}
