//! Text tables that fit a terminal and a mailing-list post: [`WIDTH`]
//! columns by default, every column with `--wide` ([`Layout::Wide`]).
//!
//! A table declares its columns with a rank: key columns (what a row is)
//! always show; the others give way lowest rank first (the rightmost first
//! among equals) until the table fits, and a note under it names what was
//! left out. A column added later (an uncertainty, a new counter) only
//! needs its rank: the table still fits, and `--wide`, the JSON and the
//! CSV still have it.
use comfy_table::{presets::UTF8_BORDERS_ONLY, CellAlignment, Table};

/// The widest line a text table prints by default.
pub const WIDTH: usize = 120;

/// How text tables are laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// At most [`WIDTH`] characters a line: lower-ranked columns left out
    /// (named under the table) and many vCPUs collapsed.
    #[default]
    Fit,
    /// Every column and every row (`--wide`).
    Wide,
}

impl Layout {
    /// `text` as this layout prints it: [`wrap`]ped to fit, or as it is.
    pub fn lines(self, text: &str) -> String {
        match self {
            Layout::Fit => wrap(text),
            Layout::Wide => text.to_string(),
        }
    }

    /// [`Layout::Wide`] when `wide`, else [`Layout::Fit`].
    pub fn wide(wide: bool) -> Self {
        if wide {
            Layout::Wide
        } else {
            Layout::Fit
        }
    }
}

/// Rank of a column that always shows (a row's key: vCPU, mode...).
pub const KEY: u8 = u8::MAX;

/// A column of a [`FitTable`].
#[derive(Clone, Debug)]
pub struct Col {
    header: String,
    rank: u8,
    right: bool,
}

impl Col {
    /// A key column (left-aligned text, always shown).
    pub fn key(header: impl Into<String>) -> Self {
        Self {
            header: header.into(),
            rank: KEY,
            right: false,
        }
    }

    /// A figure column (right-aligned); when the table is too wide, lower
    /// `rank`s are left out first.
    pub fn figure(header: impl Into<String>, rank: u8) -> Self {
        Self {
            header: header.into(),
            rank,
            right: true,
        }
    }

    /// The same column, left-aligned (a status, a name).
    pub fn left(mut self) -> Self {
        self.right = false;
        self
    }
}

/// A table whose lower-ranked columns give way to fit [`WIDTH`].
#[derive(Clone, Debug, Default)]
pub struct FitTable {
    cols: Vec<Col>,
    rows: Vec<Vec<String>>,
}

/// Characters of the widest line of `text` (what a terminal shows: the
/// box-drawing characters and `µ` are one column each).
pub fn widest_line(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

impl FitTable {
    /// A table with `cols`.
    pub fn new(cols: Vec<Col>) -> Self {
        Self {
            cols,
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per column; missing cells are empty).
    pub fn add_row(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn table(&self, shown: &[usize]) -> Table {
        let mut t = Table::new();
        t.load_style(UTF8_BORDERS_ONLY);
        t.set_header(shown.iter().map(|&c| self.cols[c].header.clone()));
        for row in &self.rows {
            t.add_row(
                shown
                    .iter()
                    .map(|&c| row.get(c).cloned().unwrap_or_default()),
            );
        }
        for (i, &c) in shown.iter().enumerate() {
            if self.cols[c].right {
                if let Some(col) = t.column_mut(i) {
                    col.set_cell_alignment(CellAlignment::Right);
                }
            }
        }
        t
    }

    /// The table as text, laid out by `layout`, with a note line under it
    /// naming the columns left out (none when every column shows). No
    /// trailing newline.
    pub fn render(&self, layout: Layout) -> String {
        let mut shown: Vec<usize> = (0..self.cols.len()).collect();
        let mut left_out: Vec<usize> = Vec::new();
        loop {
            let text = self.table(&shown).to_string();
            if layout == Layout::Wide || widest_line(&text) <= WIDTH {
                return match left_out.is_empty() {
                    true => text,
                    false => {
                        left_out.sort_unstable();
                        let names: Vec<&str> = left_out
                            .iter()
                            .map(|&c| self.cols[c].header.as_str())
                            .collect();
                        format!("{text}\n{}", left_out_note(&names))
                    }
                };
            }
            // The lowest rank gives way, the rightmost among equals.
            let Some(pos) = shown
                .iter()
                .enumerate()
                .filter(|(_, &c)| self.cols[c].rank != KEY)
                .min_by_key(|(i, &c)| (self.cols[c].rank, std::cmp::Reverse(*i)))
                .map(|(i, _)| i)
            else {
                return text;
            };
            left_out.push(shown.remove(pos));
        }
    }
}

/// The note under a table that left out the columns `names`, at most
/// [`WIDTH`] wide: as many names as fit, then how many more.
fn left_out_note(names: &[&str]) -> String {
    let n = names.len();
    let head = format!("  (left out to fit {WIDTH} columns, --wide shows them: ");
    for shown in (1..=n).rev() {
        let mut list = names[..shown].join(", ");
        if shown < n {
            list = format!("{list} and {} more", n - shown);
        }
        let note = format!("{head}{list})");
        if note.chars().count() <= WIDTH {
            return note;
        }
    }
    format!("{head}{n} columns)")
}

/// A row of a per-vCPU table: its cells, and the figure behind each cell
/// (None for names and missing figures) that [`collapse`] judges.
#[derive(Clone, Debug)]
pub struct Row {
    /// The text of each cell.
    pub cells: Vec<String>,
    /// The figure of each cell, aligned with `cells`.
    pub values: Vec<Option<f64>>,
}

/// What [`collapse`] left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hidden {
    /// Rows left out.
    pub rows: usize,
    /// Of them, rows beyond [`OUTLIER_FACTOR`] of a median that did not
    /// fit the outlier budget.
    pub outliers: usize,
}

impl Hidden {
    /// The note under the table, e.g. `... 28 more vCPUs, each within ×2
    /// of every column's median (--wide lists every row)`.
    pub fn note(&self, what: &str) -> String {
        let how = match self.outliers {
            0 => format!("each within ×{OUTLIER_FACTOR} of every column's median"),
            n => format!("{n} of them beyond ×{OUTLIER_FACTOR} of a column's median"),
        };
        format!(
            "... {} more {what}, {how} (--wide lists every row)",
            self.rows
        )
    }
}

/// A figure this many times above (or below) its column's median makes its
/// row an outlier.
pub const OUTLIER_FACTOR: f64 = 2.0;

/// How far `v` is from `median`, as a factor (1: at the median); a figure
/// where the median is 0 is as far as it is large.
fn deviation(v: f64, median: f64) -> f64 {
    if median > 0.0 && v > 0.0 {
        (v / median).max(median / v)
    } else if median == 0.0 && v == 0.0 {
        1.0
    } else {
        // One of them is 0: as far as the other is large, at least a factor
        // beyond the threshold.
        (v.abs() + median.abs() + 1.0).max(OUTLIER_FACTOR * 2.0)
    }
}

/// Many rows reduced to what a reader needs: the first `head` rows, then
/// the outliers (a figure beyond [`OUTLIER_FACTOR`] of its column's
/// median), the most extreme first, at most `max_outliers` of them, in
/// their original order; and what was left out.
pub fn collapse(rows: Vec<Row>, head: usize, max_outliers: usize) -> (Vec<Row>, Option<Hidden>) {
    if rows.len() <= head {
        return (rows, None);
    }
    let columns = rows.iter().map(|r| r.values.len()).max().unwrap_or(0);
    let medians: Vec<Option<f64>> = (0..columns)
        .map(|c| {
            let mut vs: Vec<f64> = rows
                .iter()
                .filter_map(|r| r.values.get(c).copied().flatten())
                .filter(|v| v.is_finite())
                .collect();
            vs.sort_by(f64::total_cmp);
            vs.get(vs.len() / 2).copied()
        })
        .collect();
    // Each row's largest deviation from a median.
    let worst = |r: &Row| -> f64 {
        r.values
            .iter()
            .zip(&medians)
            .filter_map(|(v, m)| Some(deviation((*v)?, (*m)?)))
            .filter(|d| d.is_finite())
            .fold(1.0, f64::max)
    };
    let mut outliers: Vec<(usize, f64)> = rows
        .iter()
        .enumerate()
        .skip(head)
        .map(|(i, r)| (i, worst(r)))
        .filter(|(_, d)| *d > OUTLIER_FACTOR)
        .collect();
    outliers.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let beyond = outliers.len().saturating_sub(max_outliers);
    outliers.truncate(max_outliers);
    let mut keep: Vec<usize> = (0..head).chain(outliers.iter().map(|(i, _)| *i)).collect();
    keep.sort_unstable();
    let total = rows.len();
    let kept: Vec<Row> = rows
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.binary_search(i).is_ok())
        .map(|(_, r)| r)
        .collect();
    let hidden = (kept.len() < total).then(|| Hidden {
        rows: total - kept.len(),
        outliers: beyond,
    });
    (kept, hidden)
}

/// `text` with every line longer than [`WIDTH`] broken at spaces, the
/// continuation indented 4 more than the line; table lines (box drawing)
/// are left alone ([`FitTable`] fits them). Hand-written: textwrap, the
/// maintained crate, needed a newer Rust than the workspace's minimum when this was written.
pub fn wrap(text: &str) -> String {
    wrap_with(text, |body| indent_of(body) + 4)
}

/// `--help` as clap writes it (clap wraps only with its `wrap_help`
/// feature, whose width is the terminal's: a piped help would differ),
/// each long line broken at [`WIDTH`] with its continuation under the
/// line's text: a flag's description under the description, a paragraph
/// under the paragraph.
pub fn wrap_help(text: &str) -> String {
    wrap_with(text, |body| {
        let indent = indent_of(body);
        let rest = &body[indent..];
        // A flag or subcommand line: its name, two spaces or more, the text.
        match rest.find("  ") {
            Some(gap) => {
                let after = &rest[gap..];
                let text_at = indent + gap + (after.len() - after.trim_start().len());
                match text_at < WIDTH / 2 {
                    true => text_at,
                    false => indent + 4,
                }
            }
            None => indent,
        }
    })
}

fn indent_of(body: &str) -> usize {
    body.len() - body.trim_start().len()
}

/// [`wrap`] with the continuation's indent given by `cont_of` (of the
/// line being broken).
fn wrap_with(text: &str, cont_of: impl Fn(&str) -> usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        let boxed = body.trim_start().starts_with(['│', '┌', '└', '╞', '├']);
        if boxed || body.chars().count() <= WIDTH {
            out.push_str(line);
            continue;
        }
        let indent = indent_of(body);
        let cont = " ".repeat(cont_of(body));
        let mut current = String::new();
        let mut width = 0;
        for word in body.trim_start().split(' ') {
            let w = word.chars().count();
            let lead = if current.is_empty() {
                &body[..indent]
            } else {
                " "
            };
            if width > 0 && width + 1 + w > WIDTH && !current.trim().is_empty() {
                out.push_str(current.trim_end());
                out.push('\n');
                current = cont.clone();
                width = cont.len();
            } else {
                current.push_str(lead);
                width += lead.chars().count();
            }
            current.push_str(word);
            width += w;
        }
        out.push_str(&current);
        out.push_str(nl);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wide_table() -> FitTable {
        let mut cols = vec![Col::key("name")];
        for i in 0..12 {
            cols.push(Col::figure(format!("figure number {i}"), i as u8));
        }
        let mut t = FitTable::new(cols);
        let mut row = vec!["row".to_string()];
        row.extend((0..12).map(|i| (i * 1000).to_string()));
        t.add_row(row);
        t
    }

    #[test]
    fn a_wide_table_fits_by_leaving_out_the_lowest_ranks() {
        let t = wide_table();
        let wide = t.render(Layout::Wide);
        assert!(widest_line(&wide) > WIDTH, "{wide}");
        assert!(!wide.contains("left out"), "{wide}");
        let fit = t.render(Layout::Fit);
        assert!(widest_line(&fit) <= WIDTH, "{fit}");
        // The highest ranks stay, the lowest went, and the note names them.
        assert!(fit.contains("figure number 11"), "{fit}");
        assert!(fit.contains("name"), "{fit}");
        let note = fit.lines().last().unwrap();
        assert!(
            note.starts_with(
                "  (left out to fit 120 columns, --wide shows them: figure number 0, "
            ),
            "{note}"
        );
        assert!(
            note.ends_with(" more)") && note.chars().count() <= WIDTH,
            "{note}"
        );
        let table: String = fit.lines().take(3).collect();
        assert!(!table.contains("figure number 0 "), "{fit}");
    }

    #[test]
    fn help_lines_wrap_under_their_text() {
        let flag = format!("      --wide  {}", "every column and vCPU ".repeat(8));
        let about = format!("Run a plan {}", "and print TAP ".repeat(10));
        let out = wrap_help(&format!("{flag}\n{about}\nshort\n"));
        assert!(widest_line(&out) <= WIDTH, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 4, "{out}");
        // The flag's description goes on under itself (column 14)...
        assert!(lines[1].starts_with(&" ".repeat(14)), "{out}");
        assert!(!lines[1].starts_with(&" ".repeat(15)), "{out}");
        // ...a paragraph under the paragraph, and nothing is lost.
        let words = |t: &str| t.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(words(&out), words(&format!("{flag} {about} short")));
        assert!(out.ends_with("\nshort\n"), "{out}");
    }

    #[test]
    fn long_lines_wrap_at_spaces_and_tables_stay() {
        let long = format!("  headline: {}", "word ".repeat(60));
        let table = format!("│ {} │", "x".repeat(150));
        let text = format!("{long}\n{table}\nshort\n");
        let w = wrap(&text);
        let lines: Vec<&str> = w.lines().collect();
        assert!(lines.len() > 4, "{w}");
        assert!(lines[0].starts_with("  headline: word"), "{w}");
        assert!(lines[1].starts_with("      word"), "{w}");
        for l in &lines {
            assert!(l.chars().count() <= WIDTH || l.starts_with('│'), "{l}");
        }
        assert!(w.contains(&table) && w.ends_with("short\n"), "{w}");
        // Every word survives, in order.
        let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(words(&w), words(&text));
    }

    fn row(name: &str, figures: &[f64]) -> Row {
        let mut cells = vec![name.to_string()];
        cells.extend(figures.iter().map(|f| f.to_string()));
        let mut values = vec![None];
        values.extend(figures.iter().map(|f| Some(*f)));
        Row { cells, values }
    }

    #[test]
    fn collapsing_keeps_the_head_and_the_outliers() {
        let mut rows: Vec<Row> = (0..30)
            .map(|i| row(&format!("vcpu{i}"), &[100.0 + i as f64, 1000.0]))
            .collect();
        rows[17] = row("vcpu17", &[100.0, 9000.0]);
        rows[23] = row("vcpu23", &[0.0, 1000.0]);
        let (kept, hidden) = collapse(rows, 2, 6);
        let names: Vec<&str> = kept.iter().map(|r| r.cells[0].as_str()).collect();
        assert_eq!(names, ["vcpu0", "vcpu1", "vcpu17", "vcpu23"]);
        let h = hidden.unwrap();
        assert_eq!(
            h,
            Hidden {
                rows: 26,
                outliers: 0
            }
        );
        assert!(h
            .note("vCPUs")
            .starts_with("... 26 more vCPUs, each within ×2"));
        // Too many outliers: the most extreme kept, the rest counted.
        let rows: Vec<Row> = (0..20)
            .map(|i| {
                let v = if i >= 13 { 10.0 * i as f64 } else { 10.0 };
                row(&format!("vcpu{i}"), &[v])
            })
            .collect();
        let (kept, hidden) = collapse(rows, 2, 3);
        let names: Vec<&str> = kept.iter().map(|r| r.cells[0].as_str()).collect();
        assert_eq!(names, ["vcpu0", "vcpu1", "vcpu17", "vcpu18", "vcpu19"]);
        assert_eq!(hidden.unwrap().outliers, 4);
    }

    #[test]
    fn a_table_that_fits_is_left_whole() {
        let mut t = FitTable::new(vec![Col::key("a"), Col::figure("b", 0)]);
        t.add_row(vec!["x".into(), "1".into()]);
        assert_eq!(t.render(Layout::Fit), t.render(Layout::Wide));
    }
}
