//! Tab-separated files with a header line; columns are chosen by name.

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

/// Reads the named columns of every row of a TSV file with a header (blank lines skipped). A
/// missing column, a row with too few fields or invalid UTF-8 is an error naming file and line.
pub fn read_tsv(path: &Path, columns: &[&str]) -> Result<Vec<TsvRow>> {
    let bytes = std::fs::read(path).map_err(io_error(path))?;
    let data_error = |line: usize, message: String| TaskError::Data {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut lines = bytes.split(|&b| b == b'\n').enumerate();
    let header = match lines.next() {
        Some((_, raw)) => std::str::from_utf8(raw)
            .map_err(|e| data_error(1, format!("invalid UTF-8 ({e})")))?
            .trim_end_matches('\r'),
        None => "",
    };
    let names: Vec<&str> = header.split('\t').collect();
    let positions = columns
        .iter()
        .map(|wanted| {
            names.iter().position(|n| n == wanted).ok_or_else(|| {
                data_error(
                    1,
                    format!(
                        "no column `{wanted}` in the header (columns: {})",
                        names.join(", ")
                    ),
                )
            })
        })
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
                    data_error(
                        number + 1,
                        format!("{} fields, the header has {}", fields.len(), names.len()),
                    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_columns_by_name_and_names_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tsv");
        std::fs::write(&path, "id\tlabel\ttext\n1\tpos\tgood film\n\n2\tneg\tbad\n").unwrap();
        let rows = read_tsv(&path, &["text", "label"]).unwrap();
        assert_eq!(rows[0].fields, ["good film", "pos"]);
        assert_eq!(
            (rows[1].line, rows[1].fields.clone()),
            (4, vec!["bad".into(), "neg".into()])
        );
        let error = read_tsv(&path, &["sentence"]).unwrap_err().to_string();
        assert!(error.contains("no column `sentence`"), "{error}");
        std::fs::write(&path, "id\tlabel\ttext\n1\tpos\n").unwrap();
        let error = read_tsv(&path, &["text"]).unwrap_err().to_string();
        assert!(error.contains("a.tsv:2"), "{error}");
    }
}
