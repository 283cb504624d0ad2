//! Drawing the view with ratatui: a header, the table of rows, the detail
//! pane of the selected row, and a line of keys. Every text that came from
//! a traced process or a file (names, evidence, causes) goes through
//! `output::escape`, as every other output of gdrtrace does: a process
//! named `e<ESC>]0;PWN<BEL>` is shown as `e\x1b]0;PWN\x07`.
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, HighlightSpacing, Paragraph, Row as TableRow, Table, TableState, Wrap},
};

use super::{
    app::App,
    columns::{COLUMNS, help_lines, keys_line, visible},
    feed::{OpRate, Row},
};
use crate::units;

fn esc(s: &str) -> String {
    crate::output::escape(s).into_owned()
}

/// Bytes per second: `-` for none, `~` before an estimate.
fn per_s(v: f64, estimated: bool) -> String {
    if v <= 0.0 {
        return "-".into();
    }
    let s = units::bytes(v.round() as u64);
    if estimated { format!("~{s}") } else { s }
}

fn count_per_s(v: f64) -> String {
    match v {
        v if v <= 0.0 => "-".into(),
        v if v < 100.0 => format!("{v:.1}"),
        v => format!("{v:.0}"),
    }
}

fn op_text(o: &OpRate) -> String {
    let p99 = o
        .p99_ns_at_most
        .map_or_else(String::new, |ns| format!(" p99<={}", units::ns_short(ns)));
    format!("{} {}/s{p99}", o.op, count_per_s(o.calls_per_s))
}

/// How a verdict is coloured: staged paths stand out, unknown ones recede.
fn verdict_style(r: &Row) -> Style {
    match r.verdict.as_str() {
        "-" | "unknown" => Style::default().add_modifier(Modifier::DIM),
        "ambiguous" => Style::default().fg(Color::Magenta),
        _ if r.host_staged => Style::default().fg(Color::Yellow),
        _ => Style::default().fg(Color::Green),
    }
}

fn table_row(r: &Row, shown: &[usize]) -> TableRow<'static> {
    let comm = match (&r.communicator, &r.rank) {
        (Some(_), Some(rank)) => format!("└ rank {}", esc(rank)),
        (Some(_), None) => "└ communicator".into(),
        (None, _) if r.exited => format!("{} (exited)", esc(&r.comm)),
        (None, _) => esc(&r.comm),
    };
    // A communicator's row names it where the operations go.
    let last = match &r.communicator {
        Some(handle) => match &r.ident {
            Some(id) => format!("commId {} (comm {})", esc(id), esc(handle)),
            None => format!("comm {}", esc(handle)),
        },
        None => esc(&r.ops.iter().map(op_text).collect::<Vec<_>>().join(", ")),
    };
    let verdict = match r.net {
        Some(net) => format!("{} {net}", r.verdict),
        None => r.verdict.clone(),
    };
    let cells = vec![
        Cell::from(if r.communicator.is_some() {
            String::new()
        } else {
            r.pid.to_string()
        }),
        Cell::from(comm),
        Cell::from(verdict).style(verdict_style(r)),
        Cell::from(r.basis.unwrap_or("").to_string()),
        Cell::from(per_s(r.moved_per_s, r.estimated)),
        Cell::from(per_s(r.staged_per_s, r.estimated)),
        Cell::from(r.staged_share.map_or("-".into(), |s| format!("{:.1}%", s * 100.0))),
        Cell::from(if r.communicator.is_some() {
            String::new()
        } else {
            count_per_s(r.registrations_per_s)
        }),
        Cell::from(match (r.vm_pin_kib, &r.communicator) {
            (_, Some(_)) => String::new(),
            (0, None) => "-".into(),
            (kib, None) => format!("{kib} kB"),
        }),
        Cell::from(last),
    ];
    let row = TableRow::new(
        cells
            .into_iter()
            .enumerate()
            .filter(|(i, _)| shown.contains(i))
            .map(|(_, c)| c),
    );
    if r.exited {
        row.style(Style::default().add_modifier(Modifier::DIM))
    } else {
        row
    }
}

fn header_lines(app: &App) -> Vec<Line<'static>> {
    let f = &app.frame;
    let mut first = vec![
        Span::styled("gdrtrace top", Style::default().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  {}  {:.1} s traced  every {}  sort: {}",
            esc(&app.source),
            f.t_s,
            app.every,
            app.order()
        )),
    ];
    if app.paused {
        first.push(Span::styled(
            "  PAUSED (p resumes)",
            Style::default().fg(Color::Black).bg(Color::Yellow),
        ));
    }
    let processes = f.rows.iter().filter(|r| r.communicator.is_none()).count();
    let mut verdicts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for r in f.rows.iter().filter(|r| r.communicator.is_none() && r.verdict != "-") {
        *verdicts.entry(r.verdict.as_str()).or_default() += 1;
    }
    let verdicts = if verdicts.is_empty() {
        "none yet".to_string()
    } else {
        verdicts
            .iter()
            .map(|(v, n)| format!("{v} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut second = vec![Span::raw(format!(
        "{processes} process{}  verdicts: {verdicts}  loss: {}",
        if processes == 1 { "" } else { "es" },
        f.loss.as_deref().unwrap_or("none")
    ))];
    if f.rows.iter().any(|r| r.estimated) {
        second.push(Span::raw("  ~ estimated (duty cycle)"));
    }
    let mut lines = vec![Line::from(first), Line::from(second)];
    match (&app.ended, app.frames) {
        (Some(why), _) => lines.push(Line::from(Span::styled(
            format!("{}: q quits", esc(why)),
            Style::default().fg(Color::Black).bg(Color::Cyan),
        ))),
        (None, 0) => lines.push(Line::from(Span::styled(
            format!("waiting for the first interval ({})", app.every),
            Style::default().add_modifier(Modifier::DIM),
        ))),
        (None, _) => {}
    }
    lines
}

fn detail_lines(app: &App) -> Vec<Line<'static>> {
    let Some(row) = app.selected_row() else {
        return vec![Line::from("no process traced yet")];
    };
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut out = Vec::new();
    let verdict = match row.basis {
        Some(b) => format!("{} ({b})", row.verdict),
        None if row.verdict == "-" => "no GPU communication seen".into(),
        None => row.verdict.clone(),
    };
    let title = match (&row.communicator, &row.ident) {
        (Some(h), ident) => format!(
            "pid {} {} communicator {}{}{}: {verdict}",
            row.pid,
            esc(&row.comm),
            esc(h),
            ident.as_ref().map_or(String::new(), |i| format!(" commId {}", esc(i))),
            row.rank.as_ref().map_or(String::new(), |r| format!(" rank {}", esc(r)))
        ),
        (None, _) => format!("pid {} {}: {verdict}", row.pid, esc(&row.comm)),
    };
    out.push(Line::from(Span::styled(title, bold)));
    let Some(d) = app.frame.details.get(&row.pid) else {
        return out;
    };
    if let Some(net) = row.net {
        out.push(Line::from(format!("  network: {net}")));
    }
    for e in &d.evidence {
        out.push(Line::from(format!("  evidence: {}", esc(e))));
    }
    if let Some(c) = &d.cause {
        out.push(Line::from(Span::styled(
            format!("  cause: {}", esc(c)),
            Style::default().fg(Color::Yellow),
        )));
    }
    // Where NCCL puts the peers is often an evidence line already.
    let other_hosts = d.other_hosts.iter().filter(|h| !d.evidence.contains(h));
    for s in other_hosts.chain(d.nccl_log.iter()) {
        out.push(Line::from(format!("  {}", esc(s))));
    }
    out.push(Line::from(format!(
        "  so far: moved {}, staged {}, {} registrations{}",
        units::bytes(d.moved_bytes),
        units::bytes(d.staged_bytes),
        d.registrations,
        if d.transports.is_empty() {
            String::new()
        } else {
            format!(
                "; calls by transport: {}",
                d.transports
                    .iter()
                    .map(|(t, n)| format!("{t} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    )));
    let causes: Vec<_> = d.causes.iter().chain(app.frame.host_causes.iter()).collect();
    if causes.is_empty() && d.paths.is_empty() {
        out.push(Line::from("  explain: no staged or unexpected path"));
    }
    for p in &d.paths {
        out.push(Line::from(format!("  path: {}", esc(p))));
    }
    for c in causes {
        out.push(Line::from(Span::styled(
            format!("  [{}] {}", esc(&c.rule), esc(&c.cause)),
            Style::default().fg(Color::Yellow),
        )));
        for e in &c.evidence {
            out.push(Line::from(format!("    evidence: {}", esc(e))));
        }
    }
    if !d.ops.is_empty() {
        out.push(Line::from(Span::styled("  operations (calls so far, now)", bold)));
        for (_, total, o) in &d.ops {
            out.push(Line::from(format!("    {total:>10}  {}", esc(&op_text(o)))));
        }
    }
    out
}

/// Draws the whole view.
pub fn draw(f: &mut Frame<'_>, app: &App) {
    let header = header_lines(app);
    let detail = app.detail;
    let [top, table, pane, keys] = Layout::vertical([
        Constraint::Length(header.len() as u16),
        Constraint::Min(3),
        Constraint::Percentage(if detail { 55 } else { 0 }),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(header), top);
    if app.help {
        let area = Rect {
            height: table.height + pane.height,
            ..table
        };
        f.render_widget(
            Paragraph::new(help_lines(f.area().width))
                .wrap(Wrap { trim: false })
                .block(Block::default().borders(Borders::TOP).title(" help (? or Esc closes) ")),
            area,
        );
    } else {
        draw_table(f, app, table);
    }
    if detail && !app.help {
        f.render_widget(
            Paragraph::new(detail_lines(app))
                .wrap(Wrap { trim: false })
                .scroll((app.scroll, 0))
                .block(Block::default().borders(Borders::TOP).title(" detail ")),
            pane,
        );
    }
    f.render_widget(
        Paragraph::new(Line::from(Span::styled(
            keys_line(keys.width),
            Style::default().add_modifier(Modifier::DIM),
        ))),
        keys,
    );
}

fn draw_table(f: &mut Frame<'_>, app: &App, area: Rect) {
    let rows = app.ordered();
    let selected = app.selected_index(&rows);
    let (shown, last, last_width) = visible(area.width);
    let widths: Vec<Constraint> = shown
        .iter()
        .map(|&i| match i {
            9 => Constraint::Min(last_width),
            i => Constraint::Length(COLUMNS[i].width),
        })
        .collect();
    let header = shown
        .iter()
        .map(|&i| Cell::from(if i == 9 { last } else { COLUMNS[i].header }));
    let table = Table::new(rows.iter().map(|r| table_row(r, &shown)), widths)
        .header(TableRow::new(header).style(Style::default().add_modifier(Modifier::REVERSED)))
        .row_highlight_style(Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED))
        .highlight_symbol(">")
        .highlight_spacing(HighlightSpacing::Always);
    let mut state = TableState::default().with_selected(selected);
    f.render_stateful_widget(table, area, &mut state);
}

#[cfg(test)]
mod tests {
    use ratatui::{Terminal, backend::TestBackend};

    use super::*;
    use crate::top::{
        columns::HOT_OPS_LONG,
        feed::{Detail, Frame as ViewFrame},
    };

    fn screen(app: &App, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("a test terminal");
        t.draw(|f| draw(f, app)).expect("draws");
        let buf = t.backend().buffer().clone();
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A name a traced process chose is shown escaped, in the table and the
    /// detail pane, and its cause is shown for the selected row.
    #[test]
    fn names_are_escaped_and_the_detail_shows_the_cause() {
        let mut app = App::new("attach pid 7".into(), "1s".into());
        let name = "e\u{1b}]0;PWN\u{7}";
        app.update(ViewFrame {
            t_s: 3.0,
            rows: vec![Row {
                pid: 7,
                comm: name.into(),
                verdict: "shm".into(),
                host_staged: true,
                basis: Some("set-up"),
                staged_per_s: 2048.0,
                moved_per_s: 4096.0,
                staged_share: Some(0.5),
                registrations_per_s: 12.5,
                vm_pin_kib: 64,
                ..Row::default()
            }],
            details: [(
                7,
                Detail {
                    evidence: vec![format!("exports by {name}")],
                    cause: Some("NCCL_P2P_DISABLE=1 in the process environment disabled P2P".into()),
                    ..Detail::default()
                },
            )]
            .into(),
            ..ViewFrame::default()
        });
        app.detail = true;
        let s = screen(&app, 160, 30);
        assert!(s.contains(r"e\x1b]0;PWN\x07"), "{s}");
        assert!(!s.contains('\u{1b}'), "{s}");
        assert!(
            s.contains("shm") && s.contains("set-up") && s.contains("12.5") && s.contains("50.0%"),
            "{s}"
        );
        assert!(s.contains("2.0KiB") && s.contains("64 kB"), "{s}");
        assert!(s.contains("cause: NCCL_P2P_DISABLE=1"), "{s}");
        assert!(s.contains(r"evidence: exports by e\x1b]0;PWN\x07"), "{s}");
    }

    /// PgDn scrolls an open detail pane; closed, it pages the table.
    #[test]
    fn page_keys_scroll_the_open_detail_pane() {
        use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
        let mut app = App::new("test".into(), "1s".into());
        app.update(ViewFrame {
            rows: vec![Row {
                pid: 1,
                comm: "job".into(),
                verdict: "shm".into(),
                ..Row::default()
            }],
            details: [(
                1,
                Detail {
                    evidence: (0..40).map(|i| format!("line-{i:02}")).collect(),
                    ..Detail::default()
                },
            )]
            .into(),
            ..ViewFrame::default()
        });
        let page = KeyEvent::new(KeyCode::PageDown, KeyModifiers::NONE);
        app.key(page);
        assert_eq!(app.scroll, 0, "closed: the table's page");
        app.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        assert!(screen(&app, 100, 30).contains("line-00"));
        app.key(page);
        let s = screen(&app, 100, 30);
        assert!(!s.contains("line-00") && s.contains("line-12"), "{s}");
    }

    /// The table's header line at `w` columns: every header whole (none
    /// cut to a prefix), the ones left out absent.
    fn headers(app: &App, w: u16) -> (String, Vec<&'static str>) {
        let s = screen(app, w, 24);
        let line = s
            .lines()
            .find(|l| l.contains(" PID "))
            .unwrap_or_else(|| panic!("a header:\n{s}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        for word in &words {
            let whole = COLUMNS
                .iter()
                .map(|c| c.header)
                .chain([HOT_OPS_LONG])
                .any(|h| h.split_whitespace().any(|p| p == *word));
            assert!(whole, "{word:?} is a cut header at {w} columns:\n{s}");
        }
        let shown = COLUMNS
            .iter()
            .map(|c| c.header)
            .filter(|h| words.contains(h) || (h.contains(' ') && line.contains(h)))
            .collect();
        (s, shown)
    }

    /// Issue 48: at 80 columns the table drops whole columns (the least
    /// needed first) instead of cutting "VERDICT" to "VERDIC"; the keys
    /// line offers `?`, which lists every column, the left-out ones marked.
    #[test]
    fn eighty_columns_drop_whole_columns_and_question_mark_helps() {
        let mut app = App::new("replay a-long-recording-name.rec.gz x20".into(), "500ms".into());
        app.update(ViewFrame {
            rows: vec![Row {
                pid: 4242,
                comm: "python3-train-long".into(),
                verdict: "host-staged".into(),
                net: Some("NET/Socket"),
                host_staged: true,
                basis: Some("steady state"),
                moved_per_s: 3.0e9,
                staged_per_s: 1.5e9,
                staged_share: Some(0.5),
                ..Row::default()
            }],
            ..ViewFrame::default()
        });
        let (wide, all) = headers(&app, 160);
        assert_eq!(all.len(), COLUMNS.len(), "160 columns show all:\n{wide}");
        let (s, shown) = headers(&app, 80);
        // What the default order (staged/s) and the verdict need stays; the
        // least needed (VmPin, REG/s) leave first.
        for must in ["PID", "COMM", "VERDICT", "STAGED/s", "STAGED%", "HOT OPS"] {
            assert!(shown.contains(&must), "{must} at 80 columns:\n{s}");
        }
        assert!(!shown.contains(&"VmPin") && !shown.contains(&"REG/s"), "{s}");
        assert!(s.contains("50.0%"), "{s}");
        assert!(s.lines().last().is_some_and(|l| l.starts_with("? help")), "{s}");
        for w in [60, 72, 100, 120] {
            headers(&app, w);
        }
        app.key(ratatui::crossterm::event::KeyEvent::from(
            ratatui::crossterm::event::KeyCode::Char('?'),
        ));
        let help = screen(&app, 80, 30);
        assert!(help.contains("help (? or Esc closes)"), "{help}");
        for c in &COLUMNS {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(c.header))
                .unwrap_or_else(|| panic!("{} in the help:\n{help}", c.header));
            assert_eq!(line.contains("(hidden"), !shown.contains(&c.header), "{line}");
        }
        app.key(ratatui::crossterm::event::KeyEvent::from(
            ratatui::crossterm::event::KeyCode::Esc,
        ));
        assert!(!app.help, "Esc closes the help, and does not quit");
    }
}
