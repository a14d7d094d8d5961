//! The C symbols compiler-generated code calls, which a freestanding image
//! must provide itself: `memcpy`/`memmove`/`memset` on `rep movsb`/`rep stosb`
//! (emulated by KVM, no SSE), `memcmp`/`bcmp` as a byte loop, and the
//! `rust_eh_personality` symbol unoptimised builds reference.

use core::arch::asm;

/// # Safety
/// C `memcpy` contract: valid, non-overlapping ranges of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract; DF is clear (ABI).
    unsafe {
        asm!("rep movsb", inout("rcx") n => _, inout("rdi") dest => _, inout("rsi") src => _,
            options(nostack, preserves_flags))
    };
    dest
}

/// # Safety
/// C `memmove` contract: valid ranges of `n` bytes, possibly overlapping.
#[no_mangle]
pub unsafe extern "C" fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dest as usize) <= (src as usize) || (dest as usize) >= (src as usize).wrapping_add(n) {
        // SAFETY: a forward copy is correct when dest is below src or disjoint.
        return unsafe { memcpy(dest, src, n) };
    }
    if n == 0 {
        return dest;
    }
    // SAFETY: dest overlaps src from above: copy backwards from the last
    // byte with DF set, and clear DF again as the ABI requires.
    unsafe {
        asm!("std", "rep movsb", "cld",
            inout("rcx") n => _, inout("rdi") dest.add(n - 1) => _, inout("rsi") src.add(n - 1) => _,
            options(nostack))
    };
    dest
}

/// # Safety
/// C `memset` contract: a valid range of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn memset(dest: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract; DF is clear (ABI).
    unsafe {
        asm!("rep stosb", inout("rcx") n => _, inout("rdi") dest => _, in("al") c as u8,
            options(nostack, preserves_flags))
    };
    dest
}

/// # Safety
/// C `memcmp` contract: two valid ranges of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: `i < n`, within both ranges.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return x as i32 - y as i32;
        }
    }
    0
}

/// # Safety
/// As `memcmp`; only equality is meaningful.
#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: same contract.
    unsafe { memcmp(a, b, n) }
}

/// Never called: the payload is built with `panic = "abort"`; debug builds of
/// `core` still reference the symbol.
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}
