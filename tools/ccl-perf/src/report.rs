//! nccl-tests' text layout and the JSON record.

use serde::Serialize;

/// C's `%g` (precision 6): the shortest of `%e` / `%f` with trailing zeros removed.
pub fn fmt_g(x: f64) -> String {
    const P: i32 = 6;
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // The exponent after rounding to P significant digits.
    let sci = format!("{:.*e}", (P - 1) as usize, x);
    let (mant, exp) = match sci.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse::<i32>().unwrap_or(0)),
        None => (sci.clone(), 0),
    };
    if !(-4..P).contains(&exp) {
        let mant = strip_zeros(&mant);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (P - 1 - exp).max(0) as usize;
        strip_zeros(&format!("{x:.decimals$}"))
    }
}

fn strip_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

/// nccl-tests' time column: 7 wide, fewer decimals as the time grows.
pub fn fmt_time(us: f64) -> String {
    if us >= 10000.0 {
        format!("{us:7.0}")
    } else if us >= 100.0 {
        format!("{us:7.1}")
    } else {
        format!("{us:7.2}")
    }
}

/// One placement's measurement.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Measure {
    pub time_us: f64,
    pub algbw: f64,
    pub busbw: f64,
    /// Wrong elements (summed over ranks where ranks can agree); None with `-c 0`.
    pub wrong: Option<u64>,
}

impl Measure {
    pub fn new(bytes: usize, secs: f64, factor: f64, wrong: Option<u64>) -> Measure {
        let algbw = if secs > 0.0 {
            bytes as f64 / 1.0e9 / secs
        } else {
            0.0
        };
        Measure {
            time_us: secs * 1.0e6,
            algbw,
            busbw: algbw * factor,
            wrong,
        }
    }

    fn columns(&self) -> String {
        let wrong = match self.wrong {
            Some(w) => format!("{:>5}", fmt_g(w as f64)),
            None => "  N/A".to_string(),
        };
        format!(
            "  {}  {:6.2}  {:6.2}  {}",
            fmt_time(self.time_us),
            self.algbw,
            self.busbw,
            wrong
        )
    }
}

/// One output row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub size: usize,
    pub count: usize,
    #[serde(rename = "type")]
    pub dtype: &'static str,
    pub redop: &'static str,
    pub root: i64,
    pub out_of_place: Measure,
    pub in_place: Measure,
}

impl Row {
    pub fn line(&self) -> String {
        format!(
            "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}",
            self.size,
            self.count,
            self.dtype,
            self.redop,
            self.root,
            self.out_of_place.columns(),
            self.in_place.columns()
        )
    }
}

/// The column header block (the lines above the first row).
pub fn column_header() -> Vec<String> {
    let blank5 = format!("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}", "", "", "", "", "");
    vec![
        "#".to_string(),
        format!("{blank5}           out-of-place                       in-place"),
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  {:>6} {:>6}",
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
            "algbw", "busbw", "#wrong"
        ),
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  {:>6}",
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)"
        ),
    ]
}

/// The closing lines.
pub fn footer(wrong_total: u64, avg_busbw: f64) -> Vec<String> {
    vec![
        format!(
            "# Out of bounds values : {} {}",
            wrong_total,
            if wrong_total > 0 { "FAILED" } else { "OK" }
        ),
        format!("# Avg bus bandwidth    : {} ", fmt_g(avg_busbw)),
        "#".to_string(),
    ]
}

/// Decodes `ncclGetVersion`'s code: `X*1000+Y*100+Z` below 2.9, `X*10000+Y*100+Z` after.
pub fn version_string(code: i32) -> String {
    let (x, y, z) = if code >= 10000 {
        (code / 10000, (code % 10000) / 100, code % 100)
    } else {
        (code / 1000, (code % 1000) / 100, code % 100)
    };
    format!("{x}.{y}.{z}")
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct JsonReport {
    pub tool: &'static str,
    pub op: &'static str,
    pub nccl_version: String,
    pub nccl_version_code: i32,
    pub library: String,
    pub launch: String,
    pub memory: &'static str,
    pub nranks: usize,
    pub nprocs: usize,
    pub gpus_per_proc: usize,
    pub iters: u32,
    pub warmup_iters: u32,
    pub check: bool,
    pub time_aggregation: &'static str,
    pub rows: Vec<Row>,
    pub summary: Summary,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub rows: usize,
    pub wrong_total: u64,
    pub avg_busbw: f64,
    pub ok: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_matches_printf() {
        let cases: [(f64, &str); 14] = [
            (0.0, "0"),
            (1.0, "1"),
            (2.5, "2.5"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (2.71234567, "2.71235"),
            (99.999951, "100"),
            (999999.5, "1e+06"),
            (16.0, "16"),
            (0.1, "0.1"),
            (-42.125, "-42.125"),
            (1e100, "1e+100"),
        ];
        for (x, want) in cases {
            assert_eq!(fmt_g(x), want, "{x}");
        }
    }

    #[test]
    fn header_matches_nccl_tests() {
        let h = column_header();
        assert_eq!(
            h[2],
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
        );
        assert_eq!(
            h[3],
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
        );
    }

    #[test]
    fn row_layout() {
        let m = Measure::new(8, 12.346e-6, 1.0, Some(0));
        let row = Row {
            size: 8,
            count: 2,
            dtype: "float",
            redop: "sum",
            root: -1,
            out_of_place: m,
            in_place: Measure { wrong: None, ..m },
        };
        assert_eq!(
            row.line(),
            "           8             2     float     sum      -1    12.35    0.00    0.00      0    12.35    0.00    0.00    N/A"
        );
        let big = Measure::new(1 << 30, 0.0123456, 1.5, Some(3));
        assert_eq!(big.columns(), "    12346   86.97  130.46      3");
        assert!((big.algbw - 86.97).abs() < 0.01);
        assert_eq!(fmt_time(123.456), "  123.5");
    }

    #[test]
    fn versions() {
        assert_eq!(version_string(22809), "2.28.9");
        assert_eq!(version_string(23007), "2.30.7");
        assert_eq!(version_string(2708), "2.7.8");
        assert_eq!(footer(0, 1.5)[0], "# Out of bounds values : 0 OK");
        assert_eq!(footer(0, 1.5)[1], "# Avg bus bandwidth    : 1.5 ");
    }
}
