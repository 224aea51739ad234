//! Reading a whole hash map in a few system calls (BPF_MAP_LOOKUP_BATCH, Linux 5.6): aya
//! walks a map with one call per key and one more per value, which for a table of 100 000
//! destinations is a fifth of a core every second.

use std::{
    io,
    mem::size_of,
    os::fd::{AsFd, AsRawFd},
};

use aya::{maps::MapData, Pod};

/// `bpf_cmd` BPF_MAP_LOOKUP_BATCH, from the kernel's UAPI.
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// Entries asked for per call. A hash bucket holding more than this would fail the call
/// with ENOSPC, and the next call asks for twice as many.
const CHUNK: u32 = 4096;

/// The `batch` member of the kernel's `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Every entry of a (non per-CPU) hash map whose keys are `K` and values `V`, in the
/// kernel's order. Entries added or removed meanwhile may or may not be in it.
pub fn entries<K: Pod + Default, V: Pod + Default>(map: &MapData) -> io::Result<Vec<(K, V)>> {
    let mut out = Vec::new();
    // Hash maps resume from a bucket index; room for 8 bytes covers every map type's cursor.
    let (mut cursor, mut next) = (0u64, 0u64);
    let mut started = false;
    let mut chunk = CHUNK;
    loop {
        let mut keys = vec![K::default(); chunk as usize];
        let mut values = vec![V::default(); chunk as usize];
        let mut attr = BatchAttr {
            in_batch: if started {
                &cursor as *const u64 as u64
            } else {
                0
            },
            out_batch: &mut next as *mut u64 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: chunk,
            map_fd: map.fd().as_fd().as_raw_fd() as u32,
            ..Default::default()
        };
        // SAFETY: the kernel writes at most `count` keys and values into buffers of `count`
        // elements of the map's key and value sizes (the caller's types), and one cursor.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &mut attr as *mut BatchAttr,
                size_of::<BatchAttr>() as u32,
            )
        };
        let err = (rc < 0).then(io::Error::last_os_error);
        match err.as_ref().and_then(io::Error::raw_os_error) {
            Some(libc::ENOSPC) if attr.count == 0 => {
                chunk *= 2;
                continue;
            }
            None | Some(libc::ENOENT) => {}
            Some(_) => return Err(err.expect("an error")),
        }
        let n = attr.count as usize;
        out.extend(keys.into_iter().zip(values).take(n));
        if err.is_some() {
            return Ok(out); // ENOENT: the walk is over
        }
        cursor = next;
        started = true;
    }
}
