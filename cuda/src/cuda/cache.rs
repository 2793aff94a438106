//! The on-disk cache of compiled kernel images.
//!
//! Files live under `$CCL_KERNEL_CACHE`, else `$XDG_CACHE_HOME/libccl`, else
//! `~/.cache/libccl` (`CCL_KERNEL_CACHE=off` disables the cache). Each is named by a hash of
//! everything that determines the image (source, architecture, NVRTC version, image kind),
//! written to a temporary file and renamed into place, and checked (magic, length, checksum)
//! when read. Any failure — unwritable directory, truncated or corrupt file — only means the
//! kernel is compiled again: the cache never fails a call.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::nvrtc::{Image, ImageKind};

const MAGIC: &[u8; 8] = b"CCLKIMG1";
const HEADER: usize = 8 + 8 + 8 + 8;

/// The cache directory the environment selects, `None` when caching is off or no home is
/// known.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os("CCL_KERNEL_CACHE") {
        let s = v.to_string_lossy();
        if s.is_empty() || s.eq_ignore_ascii_case("off") || s == "0" {
            return None;
        }
        return Some(PathBuf::from(v));
    }
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(x).join("libccl"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cache").join("libccl"))
}

/// 128-bit FNV-1a: stable across Rust versions and platforms (unlike `DefaultHasher`).
fn fnv1a128(parts: &[&[u8]]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;
    let mut h = OFFSET;
    for part in parts {
        // Length-prefix each part so ("ab","c") and ("a","bc") differ.
        for b in (part.len() as u64).to_le_bytes().iter().chain(part.iter()) {
            h ^= u128::from(*b);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The cache key of an image: 32 hex digits.
pub fn cache_key(source: &str, arch: &str, nvrtc_version: (i32, i32), kind: ImageKind) -> String {
    let version = format!("{}.{}", nvrtc_version.0, nvrtc_version.1);
    let kind = match kind {
        ImageKind::Cubin => "cubin",
        ImageKind::Ptx => "ptx",
    };
    let h = fnv1a128(&[
        b"libccl-kernel-v1",
        source.as_bytes(),
        arch.as_bytes(),
        version.as_bytes(),
        kind.as_bytes(),
    ]);
    format!("{h:032x}")
}

/// A directory of cached images (or none: every lookup misses, every store is dropped).
#[derive(Debug, Clone)]
pub struct DiskCache {
    dir: Option<PathBuf>,
}

impl DiskCache {
    /// A cache in `dir` (`None`: disabled). The directory is created on first store.
    pub fn new(dir: Option<PathBuf>) -> Self {
        DiskCache { dir }
    }

    /// The directory, if caching is on.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn path(&self, key: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{key}.bin")))
    }

    /// The image stored under `key`, if present and intact.
    pub fn load(&self, key: &str) -> Option<Image> {
        let bytes = std::fs::read(self.path(key)?).ok()?;
        decode(&bytes)
    }

    /// Takes the directory's fill lock (an exclusive `flock` on `fill.lock`, released when the
    /// returned file drops), waiting for another process that holds it. Eight ranks starting
    /// on a new machine would otherwise each compile the same kernels on the same cores;
    /// with the lock one compiles and the others then read its images. `None` when caching
    /// is off or the lock cannot be had (each process then compiles what it lacks).
    pub fn fill_lock(&self) -> Option<std::fs::File> {
        let dir = self.dir.as_ref()?;
        let locked = (|| {
            std::fs::create_dir_all(dir)?;
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join("fill.lock"))?;
            use std::os::fd::AsRawFd;
            // SAFETY: flock on a descriptor this function owns; no memory is involved.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok::<_, std::io::Error>(f)
        })();
        locked
            .map_err(
                |e| tracing::debug!(dir = %dir.display(), error = %e, "kernel cache: no fill lock"),
            )
            .ok()
    }

    /// Stores `image` under `key`; failures are logged and otherwise ignored.
    pub fn store(&self, key: &str, image: &Image) {
        let Some(path) = self.path(key) else { return };
        if let Err(e) = write_atomic(&path, &encode(image)) {
            tracing::debug!(path = %path.display(), error = %e, "kernel cache: store failed");
        }
    }
}

fn encode(image: &Image) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + image.data.len());
    out.extend_from_slice(MAGIC);
    let kind: u64 = match image.kind {
        ImageKind::Cubin => 1,
        ImageKind::Ptx => 2,
    };
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(image.data.len() as u64).to_le_bytes());
    out.extend_from_slice(&fnv1a64(&image.data).to_le_bytes());
    out.extend_from_slice(&image.data);
    out
}

fn decode(bytes: &[u8]) -> Option<Image> {
    let word = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(i..i + 8)?.try_into().ok()?))
    };
    if bytes.get(..8)? != MAGIC {
        return None;
    }
    let kind = match word(8)? {
        1 => ImageKind::Cubin,
        2 => ImageKind::Ptx,
        _ => return None,
    };
    let len = usize::try_from(word(16)?).ok()?;
    let sum = word(24)?;
    let data = bytes.get(HEADER..)?;
    if data.len() != len || fnv1a64(data) != sum || data.is_empty() {
        return None;
    }
    if kind == ImageKind::Ptx && data.last() != Some(&0) {
        return None;
    }
    Some(Image {
        kind,
        data: data.to_vec(),
    })
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("cache path has no parent"))?;
    std::fs::create_dir_all(dir)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(
        ".tmp-{}-{}-{nanos}",
        std::process::id(),
        path.file_name()
            .map(|f| f.to_string_lossy())
            .unwrap_or_default()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        // No fsync: a file a crash leaves short or stale fails its checksum and is a miss,
        // while an fsync per kernel can cost more than compiling it.
        f.write_all(bytes)?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ccl-kcache-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn key_is_stable_and_sensitive() {
        let k = cache_key("src", "sm_90", (13, 0), ImageKind::Cubin);
        // Pinned: a change here invalidates every user's cache, so it must be deliberate.
        assert_eq!(k, "fb29f569f7b9bfd7e5587452e07972ac");
        assert_eq!(k.len(), 32);
        assert_eq!(k, cache_key("src", "sm_90", (13, 0), ImageKind::Cubin));
        assert_ne!(k, cache_key("src ", "sm_90", (13, 0), ImageKind::Cubin));
        assert_ne!(k, cache_key("src", "sm_80", (13, 0), ImageKind::Cubin));
        assert_ne!(k, cache_key("src", "sm_90", (12, 8), ImageKind::Cubin));
        assert_ne!(k, cache_key("src", "sm_90", (13, 0), ImageKind::Ptx));
        assert_ne!(
            cache_key("ab", "c", (1, 0), ImageKind::Ptx),
            cache_key("a", "bc", (1, 0), ImageKind::Ptx)
        );
    }

    /// A second holder of the fill lock (another process, here another open of the file)
    /// gets it only once the first lets go; with caching off there is no lock.
    #[test]
    fn fill_lock_waits_for_its_holder() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempdir("fill");
        let c = DiskCache::new(Some(dir.clone()));
        let first = c.fill_lock().expect("lock");
        let released = AtomicBool::new(false);
        std::thread::scope(|s| {
            let second = s.spawn(|| {
                let l = DiskCache::new(Some(dir.clone())).fill_lock();
                (l.is_some(), released.load(Ordering::SeqCst))
            });
            std::thread::sleep(std::time::Duration::from_millis(200));
            released.store(true, Ordering::SeqCst);
            drop(first);
            assert_eq!(second.join().ok(), Some((true, true)));
        });
        assert!(DiskCache::new(None).fill_lock().is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn store_and_load_round_trip() {
        let dir = tempdir("rt");
        let c = DiskCache::new(Some(dir.clone()));
        let img = Image {
            kind: ImageKind::Cubin,
            data: (0..1000u32).map(|i| i as u8).collect(),
        };
        assert!(c.load("k1").is_none());
        c.store("k1", &img);
        assert_eq!(c.load("k1"), Some(img.clone()));
        let ptx = Image {
            kind: ImageKind::Ptx,
            data: b".version 8.0\0".to_vec(),
        };
        c.store("k2", &ptx);
        assert_eq!(c.load("k2"), Some(ptx));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn corrupt_files_miss() {
        let dir = tempdir("corrupt");
        let c = DiskCache::new(Some(dir.clone()));
        let img = Image {
            kind: ImageKind::Cubin,
            data: vec![7u8; 64],
        };
        c.store("k", &img);
        let path = dir.join("k.bin");
        let mut bytes = std::fs::read(&path).unwrap();
        // Flip a payload byte: checksum mismatch.
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(c.load("k").is_none());
        // Truncated, empty, garbage.
        std::fs::write(&path, &bytes[..20]).unwrap();
        assert!(c.load("k").is_none());
        std::fs::write(&path, b"").unwrap();
        assert!(c.load("k").is_none());
        std::fs::write(&path, vec![0xffu8; 100]).unwrap();
        assert!(c.load("k").is_none());
        // Storing again repairs it.
        c.store("k", &img);
        assert_eq!(c.load("k"), Some(img));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unusable_directories_do_not_fail() {
        let img = Image {
            kind: ImageKind::Cubin,
            data: vec![1, 2, 3],
        };
        // A "directory" that is a file.
        let file = std::env::temp_dir().join(format!("ccl-kcache-file-{}", std::process::id()));
        std::fs::write(&file, b"x").unwrap();
        let c = DiskCache::new(Some(file.join("sub")));
        c.store("k", &img);
        assert!(c.load("k").is_none());
        let _ = std::fs::remove_file(&file);
        // Disabled.
        let c = DiskCache::new(None);
        c.store("k", &img);
        assert!(c.load("k").is_none());
    }
}
