//! Tab-separated files, with a header line (columns chosen by name or number) or without one
//! (columns chosen by number), as SentEval's and Pang & Lee's `label<TAB>text` files come.

use std::path::Path;

use crate::error::{Result, TaskError, io_error};

/// One data row: the chosen fields and the 1-based line they come from.
#[derive(Debug, Clone, PartialEq)]
pub struct TsvRow {
    /// Line number in the file.
    pub line: usize,
    /// The chosen columns, in the order asked for.
    pub fields: Vec<String>,
}

/// Reads the chosen columns of every row of a TSV file (blank lines skipped). A column is a
/// name in the header line or a 1-based number (`"2"`: the second field); without a header
/// (`header` false) every line is a row and columns are numbers. A missing column, a row with
/// too few fields or invalid UTF-8 is an error naming file and line.
pub fn read_tsv(path: &Path, columns: &[&str], header: bool) -> Result<Vec<TsvRow>> {
    let bytes = std::fs::read(path).map_err(io_error(path))?;
    let data_error = |line: usize, message: String| TaskError::Data {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut lines = bytes.split(|&b| b == b'\n').enumerate().peekable();
    let names: Option<Vec<&str>> = match (header, lines.peek()) {
        (true, Some(_)) => {
            let (_, raw) = lines.next().expect("peeked");
            let text = std::str::from_utf8(raw)
                .map_err(|e| data_error(1, format!("invalid UTF-8 ({e})")))?;
            Some(text.trim_end_matches('\r').split('\t').collect())
        }
        (true, None) => Some(vec![""]),
        (false, _) => None,
    };
    let positions = columns
        .iter()
        .map(|wanted| column_position(wanted, names.as_deref()).map_err(|e| data_error(1, e)))
        .collect::<Result<Vec<usize>>>()?;
    let mut rows = Vec::new();
    for (number, raw) in lines {
        let line = std::str::from_utf8(raw)
            .map_err(|e| data_error(number + 1, format!("invalid UTF-8 ({e})")))?
            .trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let fields = positions
            .iter()
            .map(|&p| {
                fields.get(p).map(|f| f.to_string()).ok_or_else(|| {
                    let expected = match &names {
                        Some(names) => format!("the header has {}", names.len()),
                        None => format!("column {} is asked for", p + 1),
                    };
                    data_error(number + 1, format!("{} fields, {expected}", fields.len()))
                })
            })
            .collect::<Result<Vec<String>>>()?;
        rows.push(TsvRow {
            line: number + 1,
            fields,
        });
    }
    if rows.is_empty() {
        return Err(data_error(0, "no data row".into()));
    }
    Ok(rows)
}

/// Whether column `column` is given by number (ASCII digits only) rather than by name.
pub(crate) fn is_column_number(column: &str) -> bool {
    !column.is_empty() && column.bytes().all(|b| b.is_ascii_digit())
}

/// The 0-based field of column `wanted`: a 1-based number, or a name of the header `names`
/// (`None`: the file has no header).
fn column_position(wanted: &str, names: Option<&[&str]>) -> std::result::Result<usize, String> {
    if is_column_number(wanted) {
        let number: usize = wanted
            .parse()
            .map_err(|_| format!("column {wanted}: too large a number"))?;
        return match (number, names) {
            (0, _) => Err("columns are numbered from 1".into()),
            (n, Some(names)) if n > names.len() => Err(format!(
                "column {n} asked for, the header has {} (columns: {})",
                names.len(),
                names.join(", ")
            )),
            (n, _) => Ok(n - 1),
        };
    }
    let Some(names) = names else {
        return Err(format!(
            "column `{wanted}` by name, but the file has no header: give columns by number \
             (1 is the first)"
        ));
    };
    names.iter().position(|n| *n == wanted).ok_or_else(|| {
        format!(
            "no column `{wanted}` in the header (columns: {}; without a header line, give \
             --no-header and columns by number)",
            names.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_columns_by_name_and_names_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tsv");
        std::fs::write(&path, "id\tlabel\ttext\n1\tpos\tgood film\n\n2\tneg\tbad\n").unwrap();
        let rows = read_tsv(&path, &["text", "label"], true).unwrap();
        assert_eq!(rows[0].fields, ["good film", "pos"]);
        assert_eq!(
            (rows[1].line, rows[1].fields.clone()),
            (4, vec!["bad".into(), "neg".into()])
        );
        // By number, with the header: the same fields.
        assert_eq!(read_tsv(&path, &["3", "2"], true).unwrap(), rows);
        let error = read_tsv(&path, &["sentence"], true)
            .unwrap_err()
            .to_string();
        assert!(error.contains("no column `sentence`"), "{error}");
        let error = read_tsv(&path, &["4"], true).unwrap_err().to_string();
        assert!(
            error.contains("a.tsv:1") && error.contains("column 4"),
            "{error}"
        );
        let error = read_tsv(&path, &["0"], true).unwrap_err().to_string();
        assert!(error.contains("numbered from 1"), "{error}");
        std::fs::write(&path, "id\tlabel\ttext\n1\tpos\n").unwrap();
        let error = read_tsv(&path, &["text"], true).unwrap_err().to_string();
        assert!(error.contains("a.tsv:2"), "{error}");
    }

    #[test]
    fn without_a_header_every_line_is_a_row_and_columns_are_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.tsv");
        std::fs::write(&path, "pos\tgood film\r\n\nneg\tbad\n").unwrap();
        let rows = read_tsv(&path, &["2", "1"], false).unwrap();
        assert_eq!(
            rows,
            [
                TsvRow {
                    line: 1,
                    fields: vec!["good film".into(), "pos".into()]
                },
                TsvRow {
                    line: 3,
                    fields: vec!["bad".into(), "neg".into()]
                }
            ]
        );
        // With a header the first line would be taken for one.
        assert_eq!(read_tsv(&path, &["2", "1"], true).unwrap(), rows[1..]);
        let error = read_tsv(&path, &["text"], false).unwrap_err().to_string();
        assert!(
            error.contains("no header") && error.contains("b.tsv:1"),
            "{error}"
        );
        let error = read_tsv(&path, &["3"], false).unwrap_err().to_string();
        assert!(
            error.contains("b.tsv:1") && error.contains("2 fields, column 3"),
            "{error}"
        );
    }
}
