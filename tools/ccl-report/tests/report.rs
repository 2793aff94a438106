//! The report from two small nccl-tests logs: exact ratios, the table's cells, both plots.

use ccl_report::{parse_rows, plot, ratios, read_lib, table};

const HEAD: &str = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";

fn log(rows: &[(u64, f64, u64)]) -> String {
    let mut s = String::from(HEAD);
    for &(size, t, wrong) in rows {
        s.push_str(&format!(
            "{size:>12} {:>12}     float     sum      -1 {t:>8.2}    0.00    0.00 {wrong:>6} {t:>8.2}    0.00    0.00      0\n",
            size / 4
        ));
    }
    s.push_str("# Avg bus bandwidth    : 1.0\n");
    s
}

#[test]
fn rows_ratios_and_table_are_exact() {
    let text = log(&[(8, 10.0, 0), (2 << 20, 40.0, 3)]);
    let rows = parse_rows(&text);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[1].size, rows[1].time_us, rows[1].wrong),
        (2 << 20, 40.0, 3)
    );
    let dir = tempfile::tempdir().unwrap();
    let put = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
    put(
        "all_reduce.nccl.1.log",
        log(&[(8, 10.0, 0), (2 << 20, 40.0, 0)]),
    );
    // Two repetitions: the best time of each size counts, wrong results add up.
    put(
        "all_reduce.new.1.log",
        log(&[(8, 20.0, 0), (2 << 20, 20.0, 1)]),
    );
    put(
        "all_reduce.new.2.log",
        log(&[(8, 12.5, 0), (2 << 20, 30.0, 0)]),
    );
    put("sendrecv.new.1.log", log(&[(8, 5.0, 0)]));
    let (base, new) = (
        read_lib(dir.path(), "nccl").unwrap(),
        read_lib(dir.path(), "new").unwrap(),
    );
    let r = ratios(&base, &new);
    // sendrecv has no baseline: left out.
    assert_eq!(r.keys().collect::<Vec<_>>(), ["all_reduce"]);
    assert_eq!(r["all_reduce"], vec![(8, 0.8), (2 << 20, 2.0)]);
    let t = table(&r, ("nccl", "new"), (base.wrong, new.wrong));
    assert!(t.contains("| 8 B | 0.80 |"), "{t}");
    assert!(t.contains("| 2 MiB | 2.00 |"), "{t}");
    assert!(t.contains("| **median** | 1.40 |"), "{t}");
    assert!(t.contains("| **lowest** | 0.80 |"), "{t}");
    assert!(t.contains("nccl 0, new 1"), "{t}");
    assert!(read_lib(dir.path(), "absent").is_err());

    let (png, svg) = (dir.path().join("r.png"), dir.path().join("r.svg"));
    plot::plot(&r, "caption", &png).unwrap();
    plot::plot(&r, "caption", &svg).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // The caption's band (top 40 rows) holds nothing else: dark pixels there are its letters.
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    let width = reader.info().width as usize;
    let mut rgb = vec![0u8; reader.output_buffer_size().unwrap()];
    reader.next_frame(&mut rgb).unwrap();
    let dark = rgb[..40 * width * 3]
        .chunks(3)
        .filter(|p| p.iter().all(|&c| c < 100))
        .count();
    assert!(dark > 50, "caption drawn in the PNG: {dark} dark pixels");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("all_reduce") && svg.contains("caption"));
    assert!(plot::plot(&r, "c", &dir.path().join("r.txt")).is_err());
}

/// Each target judged on exact ratios: a size under the floor, a median under its target, a
/// large size under its target and one the logs lack all miss, naming what missed.
#[test]
fn verdict_names_what_misses_each_target() {
    let mut r = ccl_report::Ratios::new();
    r.insert(
        "all_reduce".into(),
        vec![(8, 1.2), (1 << 20, 1.1), (1 << 30, 1.0)],
    );
    r.insert(
        "sendrecv".into(),
        vec![(8, 0.5), (1 << 20, 1.0), (128 << 20, 1.2)],
    );
    let v = ccl_report::verdict(&r, &ccl_report::Targets::default());
    let lines: Vec<&str> = v.lines().collect();
    assert_eq!(
        lines,
        [
            "PASS all_reduce: every size >= 0.95",
            "PASS all_reduce: median >= 1.05",
            "MISS sendrecv: every size >= 0.95: 8 B 0.500",
            "MISS sendrecv: median >= 1.05: 1.000",
            "MISS sendrecv: >= 1.15 at 128 MiB, 1 GiB: 1 GiB not measured",
            "3 of 5 targets missed",
        ],
        "{v}"
    );
    let g = ccl_report::verdict(&r, &ccl_report::Targets::graphs());
    assert_eq!(
        g.lines().collect::<Vec<_>>(),
        [
            "PASS all_reduce: every size >= 0.95",
            "MISS sendrecv: every size >= 0.95: 8 B 0.500",
            "1 of 2 targets missed",
        ],
        "{g}"
    );
    let h = ccl_report::verdict(&r, &ccl_report::Targets::host());
    assert_eq!(
        h.lines().collect::<Vec<_>>(),
        [
            "PASS all_reduce: every size >= 1.00",
            "MISS sendrecv: every size >= 1.00: 8 B 0.500",
            "1 of 2 targets missed",
        ],
        "{h}"
    );
}
