//! libccl's own C functions, declared in `include/ccl_ext.h` rather than `nccl.h` (which stays
//! NCCL's). Exported under their own names only: they have no `pnccl` profiling twins, as
//! they are not NCCL functions.

use std::ffi::c_char;

use ccl::Error;

use crate::{guard, ncclResult_t, out};

/// Copies `text` and its NUL into `buf` (`len` bytes) when it fits; `*needed` gets the size
/// either way. `buf` may be NULL with `len` 0 to ask the size only.
///
/// # Safety
/// `buf` must be NULL or valid for `len` bytes of writes; `needed` must be NULL or valid.
unsafe fn write_text(
    text: &str,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> ccl::Result<()> {
    let size = text.len() + 1;
    *out(needed, "needed")? = size;
    if buf.is_null() && len == 0 {
        return Ok(());
    }
    if buf.is_null() {
        return Err(Error::invalid_argument("buf is NULL but len is not 0"));
    }
    if len < size {
        return Err(Error::invalid_argument(format!(
            "buf holds {len} bytes, the text needs {size}"
        )));
    }
    // SAFETY: `buf` is valid for `len >= size` bytes (the caller's contract, checked
    // non-NULL); the text is ours and does not overlap it.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    Ok(())
}

/// `cclMonitorSnapshot`: the throughput monitor's state as JSON (see `ccl_ext.h`).
///
/// # Safety
/// As [`write_text`].
#[no_mangle]
pub unsafe extern "C" fn cclMonitorSnapshot(
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> ncclResult_t {
    guard(|| {
        let text = ccl::monitor::snapshot_json()?;
        // SAFETY: forwarded caller contract.
        unsafe { write_text(&text, buf, len, needed) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NCCL_INVALID_ARGUMENT, NCCL_SUCCESS};

    #[test]
    fn the_size_protocol() {
        let mut need = 0usize;
        // SAFETY: NULL/0 asks the size; `need` is a valid place.
        let r = unsafe { cclMonitorSnapshot(std::ptr::null_mut(), 0, &mut need) };
        assert_eq!(r, NCCL_SUCCESS);
        let mut buf = vec![b'x' as c_char; need];
        let mut again = 0usize;
        // SAFETY: `buf` holds `need - 1` bytes, too few; nothing may be written.
        let r = unsafe { cclMonitorSnapshot(buf.as_mut_ptr(), need - 1, &mut again) };
        assert_eq!(
            (r, again, buf[0]),
            (NCCL_INVALID_ARGUMENT, need, b'x' as c_char)
        );
        // SAFETY: `buf` holds `need` bytes.
        let r = unsafe { cclMonitorSnapshot(buf.as_mut_ptr(), need, &mut again) };
        assert_eq!(r, NCCL_SUCCESS);
        let text: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
        let text = std::ffi::CStr::from_bytes_with_nul(&text)
            .unwrap()
            .to_str()
            .unwrap();
        assert!(text.starts_with("{\"enabled\":false,\"keys\":[]"), "{text}");
        // SAFETY: a NULL `needed` is checked.
        let r = unsafe { cclMonitorSnapshot(buf.as_mut_ptr(), need, std::ptr::null_mut()) };
        assert_eq!(r, NCCL_INVALID_ARGUMENT);
    }
}
