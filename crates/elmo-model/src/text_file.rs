//! Text files as the corpus readers and `elmo embed` open them: plain, or gzip-compressed
//! (RFC 1952; recognised by its magic number, whatever the file's name) and decompressed as read,
//! every member of a multi-member file in turn, as `zcat` reads it.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use flate2::bufread::MultiGzDecoder;

/// The first two bytes of a gzip file. No UTF-8 text starts with them (`0x8b` continues a
/// character and cannot follow `0x1f`).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The text of `path`, buffered with `capacity`: the file's bytes, or where it starts with
/// gzip's magic number its decompressed bytes (a damaged or cut stream is a read error).
///
/// # Errors
/// Where the file cannot be opened or its first bytes read.
pub fn open_text(path: &Path, capacity: usize) -> io::Result<Box<dyn BufRead + Send>> {
    let mut file = BufReader::with_capacity(capacity.max(GZIP_MAGIC.len()), File::open(path)?);
    Ok(match starts_gzip(&mut file)? {
        true => Box::new(BufReader::with_capacity(
            capacity,
            MultiGzDecoder::new(file),
        )),
        false => Box::new(file),
    })
}

/// Whether the file at `path` is gzip-compressed (starts with its magic number).
///
/// # Errors
/// Where the file cannot be opened or read.
pub fn is_gzip(path: &Path) -> io::Result<bool> {
    starts_gzip(&mut BufReader::with_capacity(
        GZIP_MAGIC.len(),
        File::open(path)?,
    ))
}

/// Whether the file that `file` reads from its start begins with gzip's magic number (its
/// buffer filled, nothing consumed).
fn starts_gzip(file: &mut BufReader<File>) -> io::Result<bool> {
    Ok(file.fill_buf()?.starts_with(&GZIP_MAGIC))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn gzip(members: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for member in members {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder.write_all(member).expect("compress");
            out.extend(encoder.finish().expect("finish"));
        }
        out
    }

    fn read(bytes: &[u8], capacity: usize) -> io::Result<Vec<u8>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("text");
        std::fs::write(&path, bytes).expect("write");
        let mut out = Vec::new();
        open_text(&path, capacity)?.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Plain text as it is, gzip decompressed (every member), a cut or damaged stream an
    /// error, with buffers smaller than the magic number too.
    #[test]
    fn plain_and_gzip_text_read_as_their_text() {
        let text = "a b\r\nc\n\u{1f}x\n".as_bytes();
        for capacity in [1, 3, 1 << 16] {
            assert_eq!(read(text, capacity).expect("plain"), text);
            assert_eq!(read(b"", capacity).expect("empty"), b"");
            assert_eq!(read(&[0x1f], capacity).expect("one byte"), [0x1f]);
            assert_eq!(read(&gzip(&[text]), capacity).expect("gzip"), text);
            let dir = tempfile::tempdir().expect("tempdir");
            let (plain, compressed) = (dir.path().join("plain"), dir.path().join("gz"));
            std::fs::write(&plain, text).expect("write");
            std::fs::write(&compressed, gzip(&[text])).expect("write");
            assert_eq!(
                (is_gzip(&plain).ok(), is_gzip(&compressed).ok()),
                (Some(false), Some(true))
            );
            let two = gzip(&[b"first\n", b"second\n"]);
            assert_eq!(read(&two, capacity).expect("members"), b"first\nsecond\n");
            let whole = gzip(&[text]);
            assert!(read(&whole[..whole.len() - 6], capacity).is_err(), "cut");
            let mut damaged = whole.clone();
            damaged[12] ^= 0xff;
            assert!(read(&damaged, capacity).is_err(), "damaged");
        }
    }
}
