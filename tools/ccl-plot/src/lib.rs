//! What `ccl-report` and `ccl-monitor` share to write plots: text that draws into bitmaps as
//! well as into SVG, and PNG files from the RGB buffers plotters' bitmap backend fills.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

/// Why a PNG file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PngError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("PNG encoding: {0}")]
    Encode(#[from] png::EncodingError),
}

/// Makes plotters' "sans-serif" (the only family the tools' plots use) DejaVu Sans, carried in
/// the binary: plotters draws text with the font registered under the family a style names,
/// and bitmaps get their labels with no system font library. Call before drawing; once is
/// enough, more is harmless.
pub fn use_embedded_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error here leaves text undrawable, which the drawing then reports: the carried
        // font is a well-formed TrueType file, so it does not happen.
        let _ = plotters::style::register_font(
            "sans-serif",
            plotters::style::FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

/// Writes `rgb` (8-bit RGB, row by row, `w` x `h`) to `out` as a PNG file.
pub fn write_png(rgb: &[u8], (w, h): (u32, u32), out: &Path) -> Result<(), PngError> {
    let file = File::create(out).map_err(|source| PngError::Io {
        path: out.to_owned(),
        source,
    })?;
    let mut enc = png::Encoder::new(BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A written file decodes to the same size and pixels; an unwritable path names itself.
    #[test]
    fn png_round_trips_and_errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("p.png");
        let rgb: Vec<u8> = (0..4 * 3 * 3).map(|i| i as u8).collect();
        write_png(&rgb, (4, 3), &out).unwrap();
        let mut reader = png::Decoder::new(std::io::BufReader::new(File::open(&out).unwrap()))
            .read_info()
            .unwrap();
        assert_eq!((reader.info().width, reader.info().height), (4, 3));
        let mut got = vec![0u8; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut got).unwrap();
        assert_eq!(got, rgb);
        let bad = dir.path().join("no-such-folder").join("p.png");
        let e = write_png(&rgb, (4, 3), &bad).unwrap_err().to_string();
        assert!(e.contains("no-such-folder"), "{e}");
    }
}
