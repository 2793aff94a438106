//! The environment report's lines, from given variables.

use super::{edits, nearest, notes};

fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn settings_read_unread_and_mistyped_each_get_their_line() {
    let lines = notes(&vars(&[
        ("PATH", "/bin"),
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("NCCL_NSOCKS_PERTHREAD", "4"),
        ("CCL_MONITR", "1"),
        ("NCCL_TOPO_FILE", "/t.xml"),
        ("CCL_SOMETHING_ELSE", "x"),
    ]));
    assert_eq!(
        lines,
        [
            "CCL_MONITR is set but is no libccl setting (nearest: CCL_MONITOR)",
            "CCL_SOMETHING_ELSE is set but is no libccl setting",
            "NCCL_NSOCKS_PERTHREAD is set (to 4); libccl does not read it",
            "NCCL_SOCKET_IFNAME set by environment to eth0",
            "NCCL_TOPO_FILE set by environment to /t.xml",
        ]
    );
}

#[test]
fn the_nearest_name_is_within_two_edits() {
    assert_eq!(edits("kitten", "sitting"), 3);
    assert_eq!(edits("", "ab"), 2);
    assert_eq!(edits("CCL_TIMEOUT_S", "CCL_TIMEOUT_S"), 0);
    assert_eq!(nearest("CCL_TIMEOT_S"), Some("CCL_TIMEOUT_S"));
    assert_eq!(nearest("CCL_MONITOR_WINDOWS"), Some("CCL_MONITOR_WINDOW"));
    assert_eq!(nearest("CCL_QQQQQQQQ"), None);
}
