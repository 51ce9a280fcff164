//! `sentence_to_index` of AllenNLP's `elmo` command (`allennlp/commands/elmo.py`, `embed_file`):
//! a JSON object from each sentence to the string of its line number, written as AllenNLP
//! writes it: the keys in the order sentences first appear, a repeated sentence mapped to its
//! last line, in Python's `json.dumps` format (`", "` and `": "` between items, every character
//! outside printable ASCII as a `\uXXXX` escape).
//!
//! The lines are kept flat until the end: a line costs its text and 24 bytes (no string, map
//! entry or hash table of its own), and the repeats are found by one sort when the JSON is made.

use std::collections::HashMap;
use std::fmt::Write as _;

use anyhow::{Result, bail};

/// The most bytes of one variable-length string in HDF5 (an element stores its length in 32
/// bits), so the most of `sentence_to_index`.
pub const MAX_JSON_BYTES: u64 = u32::MAX as u64;

/// Every line's sentence, in the order noted.
#[derive(Debug, Default)]
pub struct SentenceIndex {
    /// The sentences, one after another.
    texts: String,
    /// Per noted line: where its sentence first appeared, its number, and where its sentence
    /// ends in `texts`.
    lines: Vec<(usize, usize, usize)>,
}

impl SentenceIndex {
    /// Records that line `line` holds `sentence`. Lines may come in any order; a line noted
    /// twice with one sentence counts once.
    pub fn note(&mut self, line: usize, sentence: &str) {
        self.note_at(line, line, sentence);
    }

    /// Records that line `line` holds `sentence`, which first appeared at `position` (a line
    /// number, or any number that orders the sentences as their first lines would): a key goes
    /// where the least position of its sentence puts it. For `sentence_to_index` objects read
    /// back, whose sentences' first lines are lost but not their order.
    pub fn note_at(&mut self, position: usize, line: usize, sentence: &str) {
        self.texts.push_str(sentence);
        self.lines.push((position, line, self.texts.len()));
    }

    /// The sentence of the `k`-th noted line.
    fn text(&self, k: usize) -> &str {
        let start = k.checked_sub(1).map_or(0, |before| self.lines[before].2);
        &self.texts[start..self.lines[k].2]
    }

    /// The keys in their order: (where the key goes, its line, a noted line of its sentence).
    fn keys(&self) -> Vec<(usize, usize, usize)> {
        // Equal sentences next to each other: each run gives a key, where it goes (its least
        // position) and its value (its last line).
        let mut order: Vec<usize> = (0..self.lines.len()).collect();
        order.sort_unstable_by(|&a, &b| self.text(a).cmp(self.text(b)));
        let mut keys: Vec<(usize, usize, usize)> = order
            .chunk_by(|&a, &b| self.text(a) == self.text(b))
            .map(|run| {
                let first = run.iter().map(|&k| self.lines[k].0).min().unwrap_or(0);
                let last = run.iter().map(|&k| self.lines[k].1).max().unwrap_or(0);
                (first, last, run[0])
            })
            .collect();
        drop(order);
        keys.sort_unstable_by_key(|&(first, last, _)| (first, last));
        keys
    }

    /// The object's keys in order and its length, to write it ([`SentenceJson::write_to`]).
    pub fn json(&self) -> SentenceJson<'_> {
        let keys = self.keys();
        let length = json_bytes(
            keys.iter()
                .map(|&(_, last, k)| (python_json_len(self.text(k)), last)),
        );
        SentenceJson {
            index: self,
            keys,
            length,
        }
    }

    /// An error when the object ([`Self::json`]) would take over `limit` bytes: a bound first (every
    /// noted line a key of its own, no sort), then, past it, the length itself.
    pub fn check_fits(&self, limit: u64) -> Result<()> {
        let bound = json_bytes(
            (0..self.lines.len()).map(|k| (python_json_len(self.text(k)), self.lines[k].1)),
        );
        if bound <= limit {
            return Ok(());
        }
        check_json_bytes(self.json().bytes(), limit)
    }
}

/// `sentence_to_index` ready to be written: its keys in order and its length in bytes.
pub struct SentenceJson<'a> {
    index: &'a SentenceIndex,
    /// As [`SentenceIndex::keys`] gives them.
    keys: Vec<(usize, usize, usize)>,
    length: u64,
}

impl SentenceJson<'_> {
    /// The length of the object in bytes.
    pub fn bytes(&self) -> u64 {
        self.length
    }

    /// Writes the object, byte for byte as AllenNLP's `json.dumps(sentence_to_index)`, a key at
    /// a time (it is not made whole in memory).
    pub fn write_to(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let mut item = String::new();
        out.write_all(b"{")?;
        for (i, &(_, last, k)) in self.keys.iter().enumerate() {
            item.clear();
            if i > 0 {
                item.push_str(", ");
            }
            push_python_json_string(&mut item, self.index.text(k));
            // Writing to a String cannot fail.
            let _ = write!(item, ": \"{last}\"");
            out.write_all(item.as_bytes())?;
        }
        out.write_all(b"}")
    }
}

/// The length of the JSON object of `keys` (the length of the sentence as a JSON string, line).
fn json_bytes(keys: impl Iterator<Item = (u64, usize)>) -> u64 {
    let mut bytes = 2;
    for (i, (sentence, line)) in keys.enumerate() {
        // `", "` before every key but the first; `"SENTENCE": "LINE"`.
        bytes += if i > 0 { 2 } else { 0 } + sentence + 4 + digits(line);
    }
    bytes
}

fn digits(line: usize) -> u64 {
    u64::from(line.checked_ilog10().unwrap_or(0) + 1)
}

/// The bytes of `sentence_to_index` for `lines` (line, sentence) in one pass, keeping 48 bytes
/// a distinct sentence (its hash, its escaped length, its last line) rather than the text:
/// for checking, before an input is embedded, that the object fits [`MAX_JSON_BYTES`].
pub fn json_bytes_of(lines: impl Iterator<Item = Result<(usize, String)>>) -> Result<u64> {
    let mut keys: HashMap<u128, (u64, usize)> = HashMap::new();
    for line in lines {
        let (line, sentence) = line?;
        let key = keys
            .entry(xxhash_rust::xxh3::xxh3_128(sentence.as_bytes()))
            .or_insert((python_json_len(&sentence), line));
        key.1 = key.1.max(line);
    }
    Ok(json_bytes(keys.into_values()))
}

/// An error when a `sentence_to_index` of `bytes` would not fit one HDF5 string.
pub fn check_json_bytes(bytes: u64, limit: u64) -> Result<()> {
    if bytes > limit {
        bail!(
            "its sentence_to_index would take {bytes} bytes, over HDF5's limit of {limit} bytes \
             for one string"
        );
    }
    Ok(())
}

/// The length of `text` as [`push_python_json_string`] writes it, counted as it writes.
fn python_json_len(text: &str) -> u64 {
    struct Count(u64);
    impl std::fmt::Write for Count {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 += s.len() as u64;
            Ok(())
        }
    }
    let mut count = Count(0);
    push_python_json_string(&mut count, text);
    count.0
}

/// `text` as a JSON string the way Python's `json.dumps` writes it with its default
/// `ensure_ascii=True` (CPython's `ascii_escape_unicode`): printable ASCII as itself but `"` and
/// `\`, the five short escapes, and every other character as `\u` and four lowercase hex digits
/// of each of its UTF-16 units.
fn push_python_json_string(out: &mut impl std::fmt::Write, text: &str) {
    // Writing to a String or a count cannot fail.
    let _ = out.write_char('"');
    for c in text.chars() {
        let _ = match c {
            '"' => out.write_str("\\\""),
            '\\' => out.write_str("\\\\"),
            '\n' => out.write_str("\\n"),
            '\r' => out.write_str("\\r"),
            '\t' => out.write_str("\\t"),
            '\u{8}' => out.write_str("\\b"),
            '\u{c}' => out.write_str("\\f"),
            ' '..='~' => out.write_char(c),
            _ => {
                let mut units = [0u16; 2];
                c.encode_utf16(&mut units)
                    .iter()
                    .try_for_each(|unit| write!(out, "\\u{unit:04x}"))
            }
        };
    }
    let _ = out.write_char('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON object, written to memory.
    fn to_json(index: &SentenceIndex) -> String {
        let mut bytes = Vec::new();
        index
            .json()
            .write_to(&mut bytes)
            .expect("writing to memory");
        String::from_utf8(bytes).expect("UTF-8")
    }

    /// Lines with repeats (and an empty one).
    const REPEATS: [(usize, &str); 6] = [
        (0, "b a"),
        (1, "a"),
        (2, "b a"),
        (3, "c"),
        (4, "a"),
        (5, ""),
    ];

    fn json(lines: &[(usize, &str)]) -> String {
        let mut index = SentenceIndex::default();
        for &(line, sentence) in lines {
            index.note(line, sentence);
        }
        to_json(&index)
    }

    /// Golden strings from Python 3.11: `json.dumps(d)` of the dict AllenNLP builds
    /// (`d[sentence] = str(i)` line by line).
    #[test]
    fn writes_what_python_json_dumps_writes() {
        assert_eq!(json(&[]), "{}");
        // d = {}; for i, s in enumerate(["b a", "a", "b a", "c", "a", ""]): d[s] = str(i)
        let lines = REPEATS;
        let expected = r#"{"b a": "2", "a": "4", "c": "3", "": "5"}"#;
        assert_eq!(json(&lines), expected);
        // The order lines are noted in does not matter.
        let mut reversed = lines;
        reversed.reverse();
        assert_eq!(json(&reversed), expected);
        // json.dumps({'say "hi" \\ back': "0", "naïve café": "1", "tab\tin": "2",
        //             "emoji 😀": "3", "\x7f\x1f\x08\x0c\r\n": "4", "ǅ€": "5"})
        assert_eq!(
            json(&[
                (0, "say \"hi\" \\ back"),
                (1, "naïve café"),
                (2, "tab\tin"),
                (3, "emoji 😀"),
                (4, "\u{7f}\u{1f}\u{8}\u{c}\r\n"),
                (5, "ǅ€"),
            ]),
            r#"{"say \"hi\" \\ back": "0", "na\u00efve caf\u00e9": "1", "tab\tin": "2", "emoji \ud83d\ude00": "3", "\u007f\u001f\b\f\r\n": "4", "\u01c5\u20ac": "5"}"#
        );
    }

    /// Two shards' objects read back and noted in their order give the whole input's object.
    #[test]
    fn shards_read_back_in_order_give_the_whole_object() {
        let lines = ["a", "b", "a", "c", "b", "d", "c"];
        let whole = json(&lines.iter().copied().enumerate().collect::<Vec<_>>());
        assert_eq!(whole, r#"{"a": "2", "b": "4", "c": "6", "d": "5"}"#);
        // The shards' objects: lines 0-3 and 4-6, each as AllenNLP writes it.
        let parts = [
            [("a", 2), ("b", 1), ("c", 3)],
            [("b", 4), ("d", 5), ("c", 6)],
        ];
        let mut merged = SentenceIndex::default();
        for (position, (sentence, line)) in parts.iter().flatten().enumerate() {
            merged.note_at(position, *line, sentence);
        }
        assert_eq!(to_json(&merged), whole);
    }

    /// The length found without making the object, from the index or in one pass over the
    /// lines, is the object's.
    #[test]
    fn json_bytes_are_the_length_of_the_object() {
        let cases: [&[(usize, &str)]; 4] = [
            &[],
            &REPEATS,
            &[
                (0, "say \"hi\" \\ back"),
                (9, "na\u{ef}ve caf\u{e9}"),
                (10, "emoji \u{1f600}"),
                (99, "\u{7f}\u{1f}\u{8}\u{c}\r\n\t"),
                (100, "na\u{ef}ve caf\u{e9}"),
            ],
            &[(123_456, "x")],
        ];
        for lines in cases {
            let mut index = SentenceIndex::default();
            for &(line, sentence) in lines {
                index.note(line, sentence);
            }
            let json = to_json(&index);
            assert_eq!(index.json().bytes(), json.len() as u64, "{json}");
            let length = json.len() as u64;
            assert!(index.check_fits(length).is_ok());
            assert!(index.check_fits(length - 1).is_err(), "{json}");
            let one_pass = json_bytes_of(lines.iter().map(|&(l, s)| Ok((l, s.to_string()))));
            assert_eq!(one_pass.expect("bytes"), json.len() as u64, "{json}");
            assert!(check_json_bytes(json.len() as u64, json.len() as u64).is_ok());
            let over = check_json_bytes(json.len() as u64, json.len() as u64 - 1);
            assert!(over.is_err_and(|e| e.to_string().contains("limit")));
        }
    }

    #[test]
    fn a_line_noted_twice_counts_once() {
        assert_eq!(
            json(&[(3, "x"), (1, "y"), (3, "x"), (7, "x")]),
            r#"{"y": "1", "x": "7"}"#
        );
    }
}
