//! Process-wide memory settings: for request loops (`arl-rollout`) and for
//! libtorch's tensors (`arl-train`).
/// Tells the allocator to keep freed memory for reuse instead of handing it
/// back to the kernel a second later (mimalloc's `purge_delay`): a process
/// that frees and reallocates at a steady rate, as `arl-rollout` does per
/// request, otherwise has the kernel zero the same (transparent huge) pages
/// again and again, a tenth of its CPU in `scripts/bench/rollout.sh`. The
/// memory held is the process's peak. Returns whether the option was set:
/// `false` when the linked mimalloc does not number its options as this code
/// expects (the option's default, 1000, is checked first) or when
/// `MIMALLOC_PURGE_DELAY` is set, in which cases nothing changes.
pub fn keep_freed_memory() -> bool {
    // mimalloc 3's `mi_option_purge_delay` (libmimalloc-sys' bindings do not name it).
    const PURGE_DELAY: std::ffi::c_int = 15;
    extern "C" {
        fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
        fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }
    // SAFETY: both functions only read or write the allocator's option table.
    unsafe {
        match mi_option_get(PURGE_DELAY) {
            -1 => true,
            1000 => {
                mi_option_set(PURGE_DELAY, -1);
                mi_option_get(PURGE_DELAY) == -1
            }
            _ => false,
        }
    }
}

/// Turns transparent huge pages off for the rest of this process's life
/// (`prctl(PR_SET_THP_DISABLE)`; mimalloc asks for them on its arenas, the
/// system's `madvise` mode grants them). Each fresh 2 MiB page is then one
/// fault that zeroes it whole, and where other processes have just freed
/// memory those faults doubled `arl-rollout`'s kernel time per request
/// (`scripts/bench/rollout.sh` right after its Python client: 19.6 µs
/// against 9.3 µs with 4 KiB pages). For request loops whose heap grows with
/// the dataset; their working set is small enough not to miss the larger
/// TLB reach. Returns whether huge pages are off now.
pub fn no_transparent_huge_pages() -> bool {
    // SAFETY: prctl with these options reads or sets one flag of this process.
    unsafe {
        if libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 {
            return true;
        }
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 && libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1
    }
}

/// Gives every C allocation of at least `bytes` its own mapping, returned
/// to the kernel when freed (glibc's `M_MMAP_THRESHOLD`; libtorch's CPU
/// tensors come from the C allocator, not from mimalloc). By default glibc
/// raises that threshold to the size of each mapped block freed, up to
/// 32 MiB, after which a training step's activations (tens of MB each,
/// allocated and freed in an order that changes every layer) are carved out
/// of the heap and its free lists: freed memory the next, differently sized
/// tensor cannot use. Measured on one RL step of SmolLM2-135M over 8 × 512
/// tokens in one micro-batch: peak RSS 10.0 GB → 9.3 GB for full
/// fine-tuning and 10.6 GB → 7.7 GB with a LoRA adapter, each step 5–10%
/// faster (thresholds of 128 KiB and 4 MiB measured the same;
/// `scripts/bench/lora.sh`). Does nothing when
/// `MALLOC_MMAP_THRESHOLD_` is set (the user's choice stands) or outside
/// glibc. Returns whether the threshold is set now.
pub fn map_large_allocations(bytes: usize) -> bool {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return false;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let Ok(b) = std::ffi::c_int::try_from(bytes) else { return false };
        // SAFETY: mallopt only sets a parameter of glibc's allocator.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, b) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = bytes;
        false
    }
}

#[cfg(test)]
mod alloc_tests {
    #[test]
    fn the_allocator_keeps_freed_memory_when_asked() {
        assert!(super::keep_freed_memory(), "mimalloc's option numbering changed: update PURGE_DELAY");
    }

    #[test]
    fn large_c_allocations_can_be_mapped_alone() {
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            assert!(super::map_large_allocations(1 << 20));
            assert!(!super::map_large_allocations(usize::MAX), "a threshold glibc cannot take is refused");
        }
    }

    #[test]
    fn transparent_huge_pages_can_be_turned_off() {
        assert!(super::no_transparent_huge_pages());
        assert!(super::no_transparent_huge_pages(), "and stay off");
    }
}
