//! A small text table for terminal summaries: optional headers, rows,
//! per-column alignment, rendered to a `String` with aligned columns.
//!
//! ```
//! use quorumlock_testbed::table::{Align, Table};
//!
//! let mut table = Table::new([Align::Left, Align::Right])
//!     .indent(2)
//!     .header(["phase", "acquired"]);
//! table.row(["all up", "1200"]).row(["restarted", "87"]);
//! assert_eq!(
//!     table.render(),
//!     "  phase      acquired\n  all up         1200\n  restarted        87\n"
//! );
//! ```
//!
//! Widths count characters (not bytes), so `µs` or `…` do not skew a
//! column. Lines carry no trailing spaces.

use std::fmt;

/// How a column's cells sit in its width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Padded on the right (text).
    Left,
    /// Padded on the left (figures).
    Right,
}

/// A table of text cells; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct Table {
    aligns: Vec<Align>,
    min_widths: Vec<usize>,
    header: Option<Vec<String>>,
    rows: Vec<Line>,
    indent: usize,
    gap: usize,
}

#[derive(Clone, Debug)]
enum Line {
    Cells(Vec<String>),
    Text(String),
}

impl Table {
    /// An empty table with one column per alignment (a row may have more
    /// cells: those columns are left-aligned), no header, no indent and two
    /// spaces between columns.
    pub fn new(aligns: impl IntoIterator<Item = Align>) -> Table {
        Table {
            aligns: aligns.into_iter().collect(),
            min_widths: Vec::new(),
            header: None,
            rows: Vec::new(),
            indent: 0,
            gap: 2,
        }
    }

    /// Heads the columns with `cells` (aligned as the columns are).
    pub fn header<S: Into<String>>(mut self, cells: impl IntoIterator<Item = S>) -> Table {
        self.header = Some(cells.into_iter().map(Into::into).collect());
        self
    }

    /// Starts every row with `spaces` spaces.
    pub fn indent(mut self, spaces: usize) -> Table {
        self.indent = spaces;
        self
    }

    /// Puts `spaces` spaces between columns (2 by default).
    pub fn gap(mut self, spaces: usize) -> Table {
        self.gap = spaces;
        self
    }

    /// The least width of each column, in order, so that a table keeps its
    /// shape whatever its cells (wider cells still widen their column).
    pub fn min_widths(mut self, widths: impl IntoIterator<Item = usize>) -> Table {
        self.min_widths = widths.into_iter().collect();
        self
    }

    /// Adds a row (missing cells at the end are empty).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Table {
        self.rows
            .push(Line::Cells(cells.into_iter().map(Into::into).collect()));
        self
    }

    /// Adds a line of text printed as it is, neither indented nor counted
    /// in the column widths: a note, a sub-heading or a blank line between
    /// rows.
    pub fn text(&mut self, line: impl Into<String>) -> &mut Table {
        self.rows.push(Line::Text(line.into()));
        self
    }

    /// Whether the table has no rows (nor text lines).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table, one line per row, each ending in a newline.
    pub fn render(&self) -> String {
        let widths = self.widths();
        let mut out = String::new();
        if let Some(header) = &self.header {
            self.render_cells(header, &widths, &mut out);
        }
        for row in &self.rows {
            match row {
                Line::Cells(cells) => self.render_cells(cells, &widths, &mut out),
                Line::Text(text) => {
                    out.push_str(text.trim_end());
                    out.push('\n');
                }
            }
        }
        out
    }

    /// Each column's width: its widest cell, header included, or its
    /// least width if larger.
    fn widths(&self) -> Vec<usize> {
        let mut widths = self.min_widths.clone();
        let rows = self.rows.iter().filter_map(|row| match row {
            Line::Cells(cells) => Some(cells),
            Line::Text(_) => None,
        });
        for cells in self.header.iter().chain(rows) {
            if widths.len() < cells.len() {
                widths.resize(cells.len(), 0);
            }
            for (width, cell) in widths.iter_mut().zip(cells) {
                *width = (*width).max(cell.chars().count());
            }
        }
        widths
    }

    fn render_cells(&self, cells: &[String], widths: &[usize], out: &mut String) {
        let start = out.len();
        out.extend(std::iter::repeat_n(' ', self.indent));
        for (i, &width) in widths.iter().enumerate() {
            if i > 0 {
                out.extend(std::iter::repeat_n(' ', self.gap));
            }
            let cell = cells.get(i).map_or("", String::as_str);
            let pad = width.saturating_sub(cell.chars().count());
            match self.aligns.get(i).copied().unwrap_or(Align::Left) {
                Align::Left => {
                    out.push_str(cell);
                    out.extend(std::iter::repeat_n(' ', pad));
                }
                Align::Right => {
                    out.extend(std::iter::repeat_n(' ', pad));
                    out.push_str(cell);
                }
            }
        }
        let kept = out[start..].trim_end().len();
        out.truncate(start + kept);
        out.push('\n');
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

/// `s` cut to at most `n` characters, with `…` when cut.
pub fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_to_their_widest_cell() {
        let mut table = Table::new([Align::Left, Align::Right, Align::Right])
            .indent(1)
            .header(["name", "n", "p99 (µs)"]);
        table
            .row(["a", "1", "12.5"])
            .row(["longer name", "1,234", "7"]);
        let expected = concat!(
            " name             n  p99 (µs)\n",
            " a                1      12.5\n",
            " longer name  1,234         7\n",
        );
        assert_eq!(table.render(), expected);
        assert_eq!(table.to_string(), expected);
    }

    #[test]
    fn least_widths_gaps_text_lines_and_short_rows() {
        let mut table = Table::new([Align::Left, Align::Right])
            .gap(1)
            .min_widths([8, 5]);
        table
            .row(["ab", "1"])
            .text("-- a note much wider than the columns --")
            .row(["only"])
            .row(["wide label here", "22"]);
        let expected = concat!(
            "ab                  1\n",
            "-- a note much wider than the columns --\n",
            "only\n",
            "wide label here    22\n",
        );
        assert_eq!(table.render(), expected);
        assert!(!table.is_empty());
        assert_eq!(Table::new([Align::Left]).render(), "");
    }

    #[test]
    fn clip_counts_characters() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("µµµµµµ", 4), "µµµ…");
        assert_eq!(clip("abc", 0), "…");
    }
}
