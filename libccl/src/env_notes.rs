//! What the environment sets for libccl, told once, at the first communicator's init
//! (`NCCL_DEBUG=INFO`, subsystem ENV): each setting libccl reads, with its value, as NCCL
//! lists its own; each `NCCL_` variable libccl does not read (NCCL has hundreds, and a tuning
//! that does nothing here should not pass unseen); each `CCL_` variable that is none of
//! libccl's settings, with the nearest one (a mistyped name is otherwise ignored in silence).

use crate::params;

/// Whether `name` is read outside the registry: by the topology search, the verbs datapath or
/// the CUDA backend.
fn read_elsewhere(name: &str) -> bool {
    [
        ccl_topology::config::ENV_VARS,
        ccl_transports::mpt::verbs::ENV_VARS,
        ccl_cuda::cuda::ENV_VARS,
    ]
    .iter()
    .any(|list| list.contains(&name))
}

/// Logs [`notes`] of this process's environment, once.
pub(crate) fn tell_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // `vars()` would panic on a variable that is not UTF-8 (and so across the C API).
        let vars: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
            .collect();
        for line in notes(&vars) {
            tracing::info!("{line}");
        }
    });
}

/// One line per `NCCL_` or `CCL_` variable of `vars`, in name order (see the module).
pub(crate) fn notes(vars: &[(String, String)]) -> Vec<String> {
    let mut ours: Vec<&(String, String)> = vars
        .iter()
        .filter(|(k, _)| k.starts_with("NCCL_") || k.starts_with("CCL_"))
        .collect();
    ours.sort();
    ours.into_iter()
        .map(|(name, value)| {
            if params::find(name).is_some() || read_elsewhere(name) {
                format!("{name} set by environment to {value}")
            } else if name.starts_with("NCCL_") {
                format!("{name} is set (to {value}); libccl does not read it")
            } else {
                match nearest(name) {
                    Some(n) => format!("{name} is set but is no libccl setting (nearest: {n})"),
                    None => format!("{name} is set but is no libccl setting"),
                }
            }
        })
        .collect()
}

/// The registry's `CCL_` name within two edits of `name`, the closest first.
fn nearest(name: &str) -> Option<&'static str> {
    params::ALL
        .iter()
        .map(|p| p.name)
        .filter(|n| n.starts_with("CCL_"))
        .map(|n| (edits(name, n), n))
        .filter(|&(d, _)| d <= 2)
        .min()
        .map(|(_, n)| n)
}

/// Levenshtein distance of `a` and `b` (bytes).
fn edits(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests;
