//! Lines and whitespace as Python's text mode reads them, the rule of the reference readers:
//! AllenNLP's `elmo` command (`allennlp/commands/elmo.py`: lines of a file opened in text mode,
//! `line.strip()`, `sentence.split()`) and bilm-tf's training data (`bilm/data.py`:
//! `open(shard).readlines()`, `sentence.split()`; `Vocabulary`: `line.strip()`).
//!
//! A line ends at `\n`, `\r\n` or a lone `\r` (universal newlines; U+0085 and U+2028, which
//! `str.splitlines` also takes, do not end a line there), and whitespace is `str.isspace`:
//! Unicode's `White_Space` and the separators U+001C-U+001F.

use std::io::{self, BufRead};

/// Whitespace as Python's `str.isspace` has it, which `str.strip` and `str.split` use.
pub fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `text.strip()`.
pub fn python_strip(text: &str) -> &str {
    text.trim_matches(is_python_space)
}

/// `text.split()`: the runs of non-whitespace, in order.
pub fn python_split(text: &str) -> impl Iterator<Item = &str> {
    text.split(is_python_space)
        .filter(|token| !token.is_empty())
}

/// Reads the lines of a byte stream as Python's universal newlines split them, one at a time
/// into a caller's buffer (bounded memory, any buffer size: a `\r\n` split across two fills of
/// the reader is one line end).
#[derive(Debug)]
pub struct UniversalLines<R> {
    reader: R,
    /// The last line ended at a `\r`: a `\n` right after it belongs to that line end.
    after_cr: bool,
}

impl<R: BufRead> UniversalLines<R> {
    /// Lines of `reader`, from its current position.
    pub fn new(reader: R) -> Self {
        Self {
            reader,
            after_cr: false,
        }
    }

    /// The bytes of the next line into `line` (cleared first), without its line end; `false`
    /// at the end of the stream.
    pub fn read_line(&mut self, line: &mut Vec<u8>) -> io::Result<bool> {
        line.clear();
        let mut read = false;
        loop {
            let available = self.reader.fill_buf()?;
            if available.is_empty() {
                return Ok(read);
            }
            if std::mem::take(&mut self.after_cr) && available[0] == b'\n' {
                self.reader.consume(1);
                continue;
            }
            read = true;
            match available.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.after_cr = available[end] == b'\r';
                    line.extend_from_slice(&available[..end]);
                    self.reader.consume(end + 1);
                    return Ok(true);
                }
                None => {
                    let n = available.len();
                    line.extend_from_slice(available);
                    self.reader.consume(n);
                }
            }
        }
    }
}

/// Counts lines as [`UniversalLines`] reads them, over a stream's bytes given in pieces of any
/// size, without looking at a line twice (a file's line count before it is read).
#[derive(Debug, Default, Clone)]
pub struct LineCounter {
    /// Line ends so far (`\n`, `\r\n` and lone `\r` alike).
    ends: u64,
    /// The last piece ended with a `\r`, which is a lone one unless a `\n` follows.
    after_cr: bool,
    /// Bytes after the last line end: a last line without one.
    open_line: bool,
}

impl LineCounter {
    /// Counts the line ends of the next piece of the stream.
    pub fn count(&mut self, piece: &[u8]) {
        let Some(&last) = piece.last() else {
            return;
        };
        // A `\r\n` counts at its `\n`; a `\r` counts where no `\n` follows it.
        let newlines = piece.iter().filter(|&&b| b == b'\n').count();
        // (Most text has no `\r`: one fast search of the piece for it first.)
        let lone_crs = if piece.contains(&b'\r') {
            piece
                .windows(2)
                .filter(|pair| pair[0] == b'\r' && pair[1] != b'\n')
                .count()
        } else {
            0
        };
        let carried = usize::from(self.after_cr && piece[0] != b'\n');
        self.ends += (newlines + lone_crs + carried) as u64;
        self.after_cr = last == b'\r';
        self.open_line = last != b'\n' && last != b'\r';
    }

    /// The lines of the bytes counted so far, a last line without its end included.
    pub fn lines(&self) -> u64 {
        self.ends + u64::from(self.after_cr) + u64::from(self.open_line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `bytes` read through a 3-byte buffer (line ends across refills), and the
    /// count of [`LineCounter`] fed 1, 2 and 7 bytes at a time.
    fn lines(bytes: &[u8]) -> Vec<String> {
        let mut reader = UniversalLines::new(io::BufReader::with_capacity(3, bytes));
        let mut line = Vec::new();
        let mut out = Vec::new();
        while reader.read_line(&mut line).expect("read") {
            out.push(String::from_utf8(line.clone()).expect("utf-8"));
        }
        for size in [1, 2, 7, bytes.len().max(1)] {
            let mut counter = LineCounter::default();
            for piece in bytes.chunks(size) {
                counter.count(piece);
            }
            assert_eq!(counter.lines(), out.len() as u64, "{bytes:?} in {size}s");
        }
        out
    }

    /// Golden values from Python 3.11: `[l.rstrip("\n") for l in open(p, encoding="utf-8")]`
    /// (universal newlines turn each line end into one `\n`).
    #[test]
    fn lines_are_pythons_universal_newlines() {
        assert_eq!(
            lines("a b\r\nc\rd\u{1c}e \u{1f}\n\u{85}x\u{2028}y\r".as_bytes()),
            ["a b", "c", "d\u{1c}e \u{1f}", "\u{85}x\u{2028}y"]
        );
        for (bytes, expected) in [
            (&b""[..], &[][..]),
            (b"\n", &[""]),
            (b"\r", &[""]),
            (b"\r\n", &[""]),
            (b"\n\r", &["", ""]),
            (b"\r\r\n", &["", ""]),
            (b"x", &["x"]),
            (b"x\ny", &["x", "y"]),
            (b"x\r\ry\r\n\nz", &["x", "", "y", "", "z"]),
            (b"ab\r\r\r\n\r", &["ab", "", "", ""]),
        ] {
            assert_eq!(lines(bytes), expected, "{bytes:?}");
        }
    }

    /// Golden values from Python 3.11: `[hex(c) for c in range(0x110000) if chr(c).isspace()]`,
    /// and `.strip()` / `.split()` of a line with each kind.
    #[test]
    fn whitespace_is_pythons_isspace() {
        let python: Vec<u32> = [0x9..=0xd, 0x1c..=0x20, 0x85..=0x85, 0xa0..=0xa0]
            .into_iter()
            .flatten()
            .chain([0x1680])
            .chain(0x2000..=0x200a)
            .chain([0x2028, 0x2029, 0x202f, 0x205f, 0x3000])
            .collect();
        let ours: Vec<u32> = (0..=0x10ffff_u32)
            .filter_map(char::from_u32)
            .filter(|&c| is_python_space(c))
            .map(u32::from)
            .collect();
        assert_eq!(ours, python);
        let line = "\u{1f} a\u{1c}b\u{85}c\u{a0}\u{a0}d\u{2028}e\u{3000}";
        assert_eq!(python_strip(line), "a\u{1c}b\u{85}c\u{a0}\u{a0}d\u{2028}e");
        assert_eq!(
            python_split(line).collect::<Vec<_>>(),
            ["a", "b", "c", "d", "e"]
        );
        assert_eq!(python_split(" \t ").count(), 0);
    }
}
