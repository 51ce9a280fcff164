//! `sentence_to_index` of AllenNLP's `elmo` command (`allennlp/commands/elmo.py`, `embed_file`):
//! a JSON object from each sentence to the string of its line number, written as AllenNLP
//! writes it: the keys in the order sentences first appear, a repeated sentence mapped to its
//! last line, in Python's `json.dumps` format (`", "` and `": "` between items, every character
//! outside printable ASCII as a `\uXXXX` escape).
//!
//! The lines are kept flat until the end: a line costs its text and 24 bytes (no string, map
//! entry or hash table of its own), and the repeats are found by one sort when the JSON is made.

use std::fmt::Write as _;

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

    /// The JSON object, byte for byte as AllenNLP's `json.dumps(sentence_to_index)`.
    pub fn to_json(&self) -> String {
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
        let mut json = String::with_capacity(self.texts.len() + 16 * keys.len() + 2);
        json.push('{');
        for (i, &(_, last, k)) in keys.iter().enumerate() {
            if i > 0 {
                json.push_str(", ");
            }
            push_python_json_string(&mut json, self.text(k));
            // Writing to a String cannot fail.
            let _ = write!(json, ": \"{last}\"");
        }
        json.push('}');
        json
    }
}

/// `text` as a JSON string the way Python's `json.dumps` writes it with its default
/// `ensure_ascii=True` (CPython's `ascii_escape_unicode`): printable ASCII as itself but `"` and
/// `\`, the five short escapes, and every other character as `\u` and four lowercase hex digits
/// of each of its UTF-16 units.
fn push_python_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(lines: &[(usize, &str)]) -> String {
        let mut index = SentenceIndex::default();
        for &(line, sentence) in lines {
            index.note(line, sentence);
        }
        index.to_json()
    }

    /// Golden strings from Python 3.11: `json.dumps(d)` of the dict AllenNLP builds
    /// (`d[sentence] = str(i)` line by line).
    #[test]
    fn writes_what_python_json_dumps_writes() {
        assert_eq!(json(&[]), "{}");
        // d = {}; for i, s in enumerate(["b a", "a", "b a", "c", "a", ""]): d[s] = str(i)
        let lines = [
            (0, "b a"),
            (1, "a"),
            (2, "b a"),
            (3, "c"),
            (4, "a"),
            (5, ""),
        ];
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
        assert_eq!(merged.to_json(), whole);
    }

    #[test]
    fn a_line_noted_twice_counts_once() {
        assert_eq!(
            json(&[(3, "x"), (1, "y"), (3, "x"), (7, "x")]),
            r#"{"y": "1", "x": "7"}"#
        );
    }
}
