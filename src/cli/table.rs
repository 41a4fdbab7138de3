//! Tables the listings print (`aurad runs`, `aurad agents`): each column as
//! wide as its widest cell, header included, two spaces between columns,
//! the last column unpadded. Pure formatting; depends on nothing.

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Align {
    Left,
    Right,
}

/// The lines of a table of `header` and `rows` (each row as many cells as
/// the header), columns aligned as `align` says (missing: left).
pub(super) fn lines(header: &[&str], rows: &[Vec<String>], align: &[Align]) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
            if i > 0 {
                out.push_str("  ");
            }
            match align.get(i).copied().unwrap_or(Align::Left) {
                Align::Right => {
                    out.push_str(&pad);
                    out.push_str(cell);
                }
                Align::Left => {
                    out.push_str(cell);
                    out.push_str(&pad);
                }
            }
        }
        out.trim_end().to_string()
    };
    let mut out = vec![line(&mut header.iter().copied())];
    for row in rows {
        out.push(line(&mut row.iter().map(String::as_str)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Align, lines};

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let rows = vec![
            vec![
                "a".to_string(),
                "waiting_approval".to_string(),
                "1.00s".to_string(),
            ],
            vec![
                "a-long-agent-name".to_string(),
                "running".to_string(),
                "-".to_string(),
            ],
        ];
        let out = lines(
            &["AGENT", "STATE", "TIME"],
            &rows,
            &[Align::Left, Align::Left, Align::Right],
        );
        assert_eq!(
            out,
            vec![
                "AGENT              STATE              TIME",
                "a                  waiting_approval  1.00s",
                "a-long-agent-name  running               -",
            ]
        );
    }
}
