//! The kernel side of limiter: C programs in `src/bpf/`, the map ABI in
//! `include/limiter_abi.h`, compiled by `build.rs` into one object with BTF.

/// ELF parsers read the object in place, so it must be aligned like the structs inside it.
#[repr(C, align(32))]
struct Aligned<Bytes: ?Sized>(Bytes);

static OBJECT_ALIGNED: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/limiter.bpf.o")));

/// The eBPF object holding every program and map.
pub static OBJECT: &[u8] = &OBJECT_ALIGNED.0;

/// Path of the C header that defines the map ABI (for the layout test of the Rust mirror).
pub const ABI_HEADER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include/limiter_abi.h");
