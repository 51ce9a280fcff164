//! A small rule-based English tokenizer for raw text (`--tokenize`), close to the Penn Treebank
//! conventions of pre-tokenized LM corpora such as the 1B Word Benchmark.
//!
//! Rules, applied to each chunk between whitespace (Python's, [`crate::python_text`]):
//! - **Numbers** keep inner `.`, `,` and `:` between digits: `3.14`, `1,000`, `10:30`.
//! - **Words** (letters, digits, marks) keep inner hyphens and apostrophes: `well-known`, `o'clock`.
//! - **Clitics** split off as in the Treebank: `don't` → `do n't`, `it's` → `it 's`, also `'re`,
//!   `'ve`, `'ll`, `'d`, `'m` (straight or curly apostrophe, any case).
//! - **Abbreviations** keep their period: dotted initials (`U.S.`, `e.g.`) and a short list of
//!   titles (`Mr.`, `Dr.`, `St.`, ...).
//! - **Punctuation** becomes tokens of its own; `...`, `--` and repeated `!`/`?` stay together.

/// Titles and common abbreviations whose final period belongs to the word (lower-cased).
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "inc", "ltd", "co", "corp",
    "mt", "gen", "gov", "sen", "rep", "rev", "col", "lt", "sgt", "capt", "no", "jan", "feb", "mar",
    "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
];

/// Clitic suffixes split from the word they end (after the apostrophe).
const CLITICS: &[&str] = &["s", "re", "ve", "ll", "d", "m"];

fn is_apostrophe(c: char) -> bool {
    c == '\'' || c == '\u{2019}'
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || is_mark(c)
}

/// Combining marks (accents written as separate code points).
fn is_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// Splits a line of raw text into tokens.
pub fn tokenize(line: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    for chunk in crate::python_text::python_split(line) {
        tokenize_chunk(chunk, &mut tokens);
    }
    tokens
}

fn tokenize_chunk(chunk: &str, tokens: &mut Vec<String>) {
    let chars: Vec<char> = chunk.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_word_char(c) {
            let end = scan_word(&chars, i);
            push_word(&chars[i..end], &chars[end..], tokens);
            i = end;
            // An abbreviation swallowed its period inside `push_word`.
            if i < chars.len() && chars[i] == '.' && ends_abbreviation(&chars[..i], &chars[i + 1..])
            {
                if let Some(last) = tokens.last_mut() {
                    last.push('.');
                }
                i += 1;
            }
        } else {
            // Punctuation: runs of `.`, `-`, `!`, `?` stay together, anything else is one char.
            let mut end = i + 1;
            if matches!(c, '.' | '-' | '!' | '?') {
                while end < chars.len() && chars[end] == c {
                    end += 1;
                }
            }
            tokens.push(chars[i..end].iter().collect());
            i = end;
        }
    }
}

/// End of the word starting at `start`: word characters, with inner `-`/apostrophes between word
/// characters, inner `.`/`,`/`:` between digits, and dotted initials (`U.S`).
fn scan_word(chars: &[char], start: usize) -> usize {
    let mut end = start;
    while end < chars.len() {
        let c = chars[end];
        if is_word_char(c) {
            end += 1;
            continue;
        }
        let prev = chars[end - 1];
        let next = chars.get(end + 1).copied();
        let joins = match (c, next) {
            ('-', Some(n)) => is_word_char(prev) && is_word_char(n),
            (a, Some(n)) if is_apostrophe(a) => prev.is_alphabetic() && n.is_alphabetic(),
            ('.' | ',' | ':', Some(n)) => prev.is_ascii_digit() && n.is_ascii_digit(),
            _ => false,
        };
        // Dotted initials: single letters separated by periods (`U.S`, `e.g`).
        let initial = c == '.'
            && next.is_some_and(char::is_alphabetic)
            && chars.get(end + 2).is_none_or(|&after| !is_word_char(after))
            && (end == start + 1 || chars.get(end.wrapping_sub(2)) == Some(&'.'));
        if joins || initial {
            end += 2;
        } else {
            break;
        }
    }
    end
}

/// Whether the `.` after `word` is part of it (dotted initials or a listed abbreviation), given
/// what follows the period in the chunk.
fn ends_abbreviation(word: &[char], after: &[char]) -> bool {
    if !after.is_empty() && after.iter().any(|&c| is_word_char(c)) {
        return false;
    }
    let text: String = word
        .iter()
        .rev()
        .take_while(|&&c| is_word_char(c) || c == '.')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let dotted = text.contains('.') && text.split('.').all(|part| part.chars().count() == 1);
    dotted || ABBREVIATIONS.contains(&text.to_lowercase().as_str())
}

/// Pushes a word, splitting a trailing clitic (`n't`, `'s`, ...) into its own token.
fn push_word(word: &[char], _rest: &[char], tokens: &mut Vec<String>) {
    let text: String = word.iter().collect();
    let lower = text.to_lowercase();
    // `n't` takes the `n` with it: `don't` → `do n't`, `can't` → `ca n't`.
    for apostrophe in ['\'', '\u{2019}'] {
        let suffix = format!("n{apostrophe}t");
        if lower.len() > suffix.len() && lower.ends_with(&suffix) {
            let split = text.len() - suffix.len();
            tokens.push(text[..split].to_string());
            tokens.push(text[split..].to_string());
            return;
        }
        for clitic in CLITICS {
            let suffix = format!("{apostrophe}{clitic}");
            if lower.len() > suffix.len() && lower.ends_with(&suffix) {
                let split = text.len() - suffix.len();
                tokens.push(text[..split].to_string());
                tokens.push(text[split..].to_string());
                return;
            }
        }
    }
    tokens.push(text);
}

#[cfg(test)]
mod tests {
    use super::tokenize;

    fn check(line: &str, expected: &[&str]) {
        assert_eq!(tokenize(line), expected, "tokenizing {line:?}");
    }

    #[test]
    fn punctuation_and_clitics() {
        check(
            "\"Don't stop,\" she said; it's 3.14 (or 1,000).",
            &[
                "\"", "Do", "n't", "stop", ",", "\"", "she", "said", ";", "it", "'s", "3.14", "(",
                "or", "1,000", ")", ".",
            ],
        );
        check(
            "We'll see—they're here!!",
            &["We", "'ll", "see", "—", "they", "'re", "here", "!!"],
        );
        check("I’m fine", &["I", "’m", "fine"]);
    }

    #[test]
    fn words_numbers_abbreviations() {
        check(
            "a well-known o'clock at 10:30",
            &["a", "well-known", "o'clock", "at", "10:30"],
        );
        check(
            "Mr. Smith of the U.S. left.",
            &["Mr.", "Smith", "of", "the", "U.S.", "left", "."],
        );
        check(
            "e.g. this... or -- that",
            &["e.g.", "this", "...", "or", "--", "that"],
        );
        check("naïve café 東京", &["naïve", "café", "東京"]);
        check("end.", &["end", "."]);
        check("", &[]);
    }
}
