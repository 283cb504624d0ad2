//! The table's columns as the terminal's width allows (whole columns
//! left out, the least needed first, never a header cut), the keys line,
//! and what `?` shows.
use ratatui::{
    style::{Modifier, Style},
    text::{Line, Span},
};

/// A column of the table: its header, its width, and its rank when the
/// terminal is narrow (rank 1 is dropped first, then 2, ...; 0 never is).
pub struct Column {
    pub header: &'static str,
    pub width: u16,
    drop: u8,
    /// What `?` says of it.
    pub about: &'static str,
}

/// The last column takes what is left, at least this much.
pub const HOT_OPS_MIN: u16 = 12;
pub const HOT_OPS_LONG: &str = "HOT OPS (p99: all targets)";

pub const COLUMNS: [Column; 10] = [
    Column {
        header: "PID",
        width: 7,
        drop: 0,
        about: "the process (blank on its communicators' rows)",
    },
    Column {
        header: "COMM",
        width: 17,
        drop: 0,
        about: "its name, or a communicator and its rank",
    },
    Column {
        header: "VERDICT",
        width: 20,
        drop: 0,
        about: "the transport judged, and NCCL's network",
    },
    Column {
        header: "BASIS",
        width: 12,
        drop: 3,
        about: "judged from the set-up or the steady state",
    },
    Column {
        header: "MOVED/s",
        width: 10,
        drop: 4,
        about: "bytes moved per second (~: estimated)",
    },
    Column {
        header: "STAGED/s",
        width: 10,
        drop: 5,
        about: "bytes through host memory per second",
    },
    Column {
        header: "STAGED%",
        width: 7,
        drop: 0,
        about: "the staged share of the bytes moved",
    },
    Column {
        header: "REG/s",
        width: 8,
        drop: 2,
        about: "memory registrations per second",
    },
    Column {
        header: "VmPin",
        width: 10,
        drop: 1,
        about: "pinned memory (VmPin of /proc/PID/status)",
    },
    Column {
        header: "HOT OPS",
        width: HOT_OPS_MIN,
        drop: 6,
        about: "the busiest operations: calls/s, p99 latency",
    },
];

/// The columns shown in `width` cells (indexes into `COLUMNS`): the ones
/// that fit whole, dropping the lowest ranks first, never cutting a
/// header; and the last column's header and width.
pub fn visible(width: u16) -> (Vec<usize>, &'static str, u16) {
    let mut shown: Vec<usize> = (0..COLUMNS.len()).collect();
    loop {
        // The `>` before the selected row, and a space between columns.
        let used: u16 = 1 + shown.iter().map(|&i| COLUMNS[i].width + 1).sum::<u16>() - 1;
        if used <= width {
            let last = shown.last().copied();
            if last == Some(COLUMNS.len() - 1) {
                let room = width - used + HOT_OPS_MIN;
                let header = if room >= HOT_OPS_LONG.len() as u16 {
                    HOT_OPS_LONG
                } else {
                    COLUMNS[9].header
                };
                return (shown, header, room);
            }
            return (shown, "", 0);
        }
        let Some(pos) = shown
            .iter()
            .enumerate()
            .filter(|(_, i)| COLUMNS[**i].drop > 0)
            .min_by_key(|(_, i)| COLUMNS[**i].drop)
            .map(|(p, _)| p)
        else {
            return (shown, "", 0);
        };
        shown.remove(pos);
    }
}

/// Each key and what it does, as `?` lists them.
pub const KEY_HELP: [(&str, &str); 8] = [
    ("? / Esc", "this help / close it"),
    ("q, Ctrl-C", "quit"),
    ("up/down j/k", "select a row (PgUp/PgDn, g/G: by pages, to the ends)"),
    ("enter, d, tab", "the detail pane of the selected row"),
    ("PgUp/PgDn", "scroll the open detail pane"),
    ("s / S", "sort by the next / previous figure"),
    ("r", "reverse the order"),
    ("p, space", "pause (the newest frame is shown on resuming)"),
];

/// The keys line: as many as fit in `width`, help first.
pub fn keys_line(width: u16) -> String {
    let mut line = String::new();
    for k in [
        "? help",
        "q quit",
        "up/down select",
        "enter detail",
        "s/S sort",
        "r reverse",
        "p pause",
        "(PgUp/PgDn scroll it)",
    ] {
        let add = if line.is_empty() { k.len() } else { k.len() + 2 };
        if line.len() + add > width as usize {
            break;
        }
        if !line.is_empty() {
            line.push_str("  ");
        }
        line.push_str(k);
    }
    line
}

/// What `?` shows: the keys, and each column with what it holds (those
/// the width leaves out marked so; the detail pane has their figures).
pub fn help_lines(width: u16) -> Vec<Line<'static>> {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let (shown, _, _) = visible(width);
    // Keys, then columns: 20 lines, whole in an 80x24 terminal.
    let mut out = Vec::new();
    for (k, what) in KEY_HELP {
        out.push(Line::from(format!("  {k:<14} {what}")));
    }
    out.push(Line::from(Span::styled(
        "columns (too narrow a terminal leaves some out)",
        bold,
    )));
    for (i, c) in COLUMNS.iter().enumerate() {
        let hidden = if shown.contains(&i) {
            ""
        } else {
            " (hidden: too narrow)"
        };
        out.push(Line::from(format!("  {:<14} {}{hidden}", c.header, c.about)));
    }
    out
}
