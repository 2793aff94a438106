//! The NCCL 2.30 parameter API over libccl's parameter registry.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use ccl::{params, Error};
use parking_lot::Mutex;

use crate::{guard, ncclResult_t, out};

/// Strings handed to C stay alive for the life of the process (values rarely change; each
/// distinct value is interned once).
fn intern(s: &str) -> *const c_char {
    static STRINGS: OnceLock<Mutex<HashMap<String, &'static CStr>>> = OnceLock::new();
    let mut m = STRINGS.get_or_init(Default::default).lock();
    if let Some(c) = m.get(s) {
        return c.as_ptr();
    }
    let c: &'static CStr = Box::leak(
        CString::new(s.replace('\0', " "))
            .unwrap_or_default()
            .into_boxed_c_str(),
    );
    m.insert(s.to_string(), c);
    c.as_ptr()
}

fn key_str<'a>(key: *const c_char) -> ccl::Result<&'a str> {
    if key.is_null() {
        return Err(Error::invalid_argument("key is NULL"));
    }
    // SAFETY: non-NULL keys are C strings (caller contract).
    unsafe { CStr::from_ptr(key) }
        .to_str()
        .map_err(|_| Error::invalid_argument("key is not UTF-8"))
}

fn lookup(key: &str) -> ccl::Result<&'static params::Param> {
    params::find(key).ok_or_else(|| Error::invalid_argument(format!("unknown parameter {key}")))
}

fn handle_param<'a>(h: *mut c_void) -> ccl::Result<&'a params::Param> {
    // SAFETY: handles are pointers to entries of the static registry (from ncclParamBind).
    unsafe { h.cast::<params::Param>().as_ref() }
        .ok_or_else(|| Error::invalid_argument("parameter handle is NULL"))
}

fn parsed<T: TryFrom<i128>>(h: *mut c_void) -> ccl::Result<T> {
    let p = handle_param(h)?;
    let s = p.get_str();
    s.trim()
        .parse::<i128>()
        .ok()
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| {
            Error::invalid_argument(format!("{}={s:?} does not fit the requested type", p.name))
        })
}

macro_rules! getters {
    ($($name:ident / $pname:ident : $t:ty;)*) => {
        crate::api! {
            $(fn $name / $pname(handle: *mut c_void, value: *mut $t) -> ncclResult_t {
                guard(|| {
                    let slot = out(value, "value")?;
                    *slot = parsed::<$t>(handle)?;
                    Ok(())
                })
            })*
        }
    };
}

getters! {
    ncclParamGetI8 / pncclParamGetI8: i8;
    ncclParamGetI16 / pncclParamGetI16: i16;
    ncclParamGetI32 / pncclParamGetI32: i32;
    ncclParamGetI64 / pncclParamGetI64: i64;
    ncclParamGetU8 / pncclParamGetU8: u8;
    ncclParamGetU16 / pncclParamGetU16: u16;
    ncclParamGetU32 / pncclParamGetU32: u32;
    ncclParamGetU64 / pncclParamGetU64: u64;
}

crate::api! {
fn ncclParamBind / pncclParamBind(handle: *mut *mut c_void, key: *const c_char) -> ncclResult_t {
    guard(|| {
        let slot = out(handle, "handle")?;
        let p = lookup(key_str(key)?)?;
        *slot = (p as *const params::Param).cast_mut().cast();
        Ok(())
    })
}

fn ncclParamGetStr / pncclParamGetStr(handle: *mut c_void, value: *mut *const c_char) -> ncclResult_t {
    guard(|| {
        let slot = out(value, "value")?;
        *slot = intern(&handle_param(handle)?.get_str());
        Ok(())
    })
}

fn ncclParamGet / pncclParamGet(handle: *mut c_void, value: *mut c_void, max_len: c_int, len: *mut c_int) -> ncclResult_t {
    guard(|| {
        let s = handle_param(handle)?.get_str();
        let need = s.len() + 1;
        if !len.is_null() {
            *out(len, "len")? = c_int::try_from(need).unwrap_or(c_int::MAX);
        }
        if !value.is_null() {
            let cap = usize::try_from(max_len).unwrap_or(0);
            if cap < need {
                return Err(Error::invalid_argument(format!("value needs {need} bytes, maxLen is {max_len}")));
            }
            // SAFETY: `value` has room for `max_len` >= need bytes (caller contract).
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), value.cast::<u8>(), s.len());
                *value.cast::<u8>().add(s.len()) = 0;
            }
        }
        Ok(())
    })
}

fn ncclParamGetParameter / pncclParamGetParameter(key: *const c_char, value: *mut *const c_char, len: *mut c_int) -> ncclResult_t {
    guard(|| {
        let slot = out(value, "value")?;
        let s = lookup(key_str(key)?)?.get_str();
        if !len.is_null() {
            *out(len, "len")? = c_int::try_from(s.len()).unwrap_or(c_int::MAX);
        }
        *slot = intern(&s);
        Ok(())
    })
}

fn ncclParamGetAllParameterKeys / pncclParamGetAllParameterKeys(keys: *mut *const *const c_char, n_keys: *mut c_int) -> ncclResult_t {
    static KEYS: OnceLock<Vec<usize>> = OnceLock::new();
    guard(|| {
        let k = out(keys, "keys")?;
        let n = out(n_keys, "nKeys")?;
        let v = KEYS.get_or_init(|| params::ALL.iter().map(|p| intern(p.name) as usize).collect());
        *k = v.as_ptr().cast();
        *n = c_int::try_from(v.len()).unwrap_or(c_int::MAX);
        Ok(())
    })
}

fn ncclParamDumpAll / pncclParamDumpAll() -> () {
    for p in params::ALL {
        let v = p.raw();
        println!(
            "{}={}{}  # {}",
            p.name,
            v.clone().unwrap_or_else(|| p.default.to_string()),
            if v.is_some() { "" } else { " (default)" },
            p.doc
        );
    }
}
}
