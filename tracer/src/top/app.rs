//! The view's state: the frame shown, the order of its rows, the selected
//! row, the pause and the detail pane; and what each key does.
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::feed::{Frame, Key, Row};

/// What rows are ordered by (descending; `r` reverses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    Staged,
    Moved,
    Share,
    Registrations,
    VmPin,
    Pid,
    Name,
}

impl Sort {
    pub const ALL: [Sort; 7] = [
        Sort::Staged,
        Sort::Moved,
        Sort::Share,
        Sort::Registrations,
        Sort::VmPin,
        Sort::Pid,
        Sort::Name,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Sort::Staged => "staged/s",
            Sort::Moved => "moved/s",
            Sort::Share => "staged share",
            Sort::Registrations => "registrations/s",
            Sort::VmPin => "VmPin",
            Sort::Pid => "pid",
            Sort::Name => "name",
        }
    }

    fn step(self, by: isize) -> Sort {
        let i = Sort::ALL.iter().position(|s| *s == self).unwrap_or(0) as isize;
        Sort::ALL[(i + by).rem_euclid(Sort::ALL.len() as isize) as usize]
    }

    /// Pid and name read best ascending, the figures descending.
    fn ascending(self) -> bool {
        matches!(self, Sort::Pid | Sort::Name)
    }

    fn cmp(self, a: &Row, b: &Row) -> std::cmp::Ordering {
        let f = |x: f64, y: f64| y.total_cmp(&x);
        match self {
            Sort::Staged => f(a.staged_per_s, b.staged_per_s),
            Sort::Moved => f(a.moved_per_s, b.moved_per_s),
            Sort::Share => f(a.staged_share.unwrap_or(-1.0), b.staged_share.unwrap_or(-1.0)),
            Sort::Registrations => f(a.registrations_per_s, b.registrations_per_s),
            Sort::VmPin => b.vm_pin_kib.cmp(&a.vm_pin_kib),
            Sort::Pid => a.pid.cmp(&b.pid),
            Sort::Name => a.comm.cmp(&b.comm),
        }
    }
}

/// What a key asks of the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Nothing,
    Redraw,
    Quit,
}

#[derive(Debug)]
pub struct App {
    /// The frame shown.
    pub frame: Frame,
    /// The newest frame, held while paused.
    held: Option<Frame>,
    pub sort: Sort,
    pub reverse: bool,
    pub paused: bool,
    pub detail: bool,
    /// The help (`?`) is shown in place of the table.
    pub help: bool,
    /// Lines the detail pane is scrolled down by (PgUp/PgDn while it is open).
    pub scroll: u16,
    /// The selected row, by identity (it stays selected as rows move).
    pub selected: Option<Key>,
    /// What is watched (`attach pid 4242`, `replay job.rec x10`).
    pub source: String,
    /// The refresh interval, as the user gave it.
    pub every: String,
    /// Set when tracing (or the replay) ended: why, and that `q` quits.
    pub ended: Option<String>,
    /// Frames received.
    pub frames: u64,
}

impl App {
    pub fn new(source: String, every: String) -> Self {
        App {
            frame: Frame::default(),
            held: None,
            sort: Sort::Staged,
            reverse: false,
            paused: false,
            detail: false,
            help: false,
            scroll: 0,
            selected: None,
            source,
            every,
            ended: None,
            frames: 0,
        }
    }

    /// A new frame: shown now, or once the display is resumed.
    pub fn update(&mut self, f: Frame) {
        self.frames += 1;
        if self.paused {
            self.held = Some(f);
        } else {
            self.frame = f;
        }
    }

    /// The last frame, shown whatever the pause (tracing ended).
    pub fn end(&mut self, why: String, last: Option<Frame>) {
        if let Some(f) = last {
            self.frames += 1;
            self.frame = f;
            self.held = None;
            self.paused = false;
        }
        self.ended = Some(why);
    }

    /// The rows in display order: processes sorted, each followed by its
    /// communicators (in handle order).
    pub fn ordered(&self) -> Vec<&Row> {
        let mut procs: Vec<&Row> = self.frame.rows.iter().filter(|r| r.communicator.is_none()).collect();
        let sort = self.sort;
        procs.sort_by(|a, b| {
            let mut o = sort.cmp(a, b);
            if self.reverse {
                o = o.reverse();
            }
            // Ties in a stable order: staged, moved, registrations, pid.
            o.then_with(|| Sort::Staged.cmp(a, b))
                .then_with(|| Sort::Moved.cmp(a, b))
                .then_with(|| Sort::Registrations.cmp(a, b))
                .then_with(|| a.pid.cmp(&b.pid))
        });
        let mut out = Vec::with_capacity(self.frame.rows.len());
        for p in procs {
            out.push(p);
            out.extend(
                self.frame
                    .rows
                    .iter()
                    .filter(|r| r.pid == p.pid && r.communicator.is_some()),
            );
        }
        out
    }

    /// The index of the selected row in display order (the first row when
    /// none is selected or it is gone).
    pub fn selected_index(&self, rows: &[&Row]) -> Option<usize> {
        if rows.is_empty() {
            return None;
        }
        Some(
            self.selected
                .as_ref()
                .and_then(|k| rows.iter().position(|r| &r.key() == k))
                .unwrap_or(0),
        )
    }

    /// The selected row, if any row is shown.
    pub fn selected_row(&self) -> Option<&Row> {
        let rows = self.ordered();
        self.selected_index(&rows).map(|i| rows[i])
    }

    fn move_by(&mut self, by: isize) {
        let (key, n) = {
            let rows = self.ordered();
            let Some(i) = self.selected_index(&rows) else { return };
            let j = (i as isize + by).clamp(0, rows.len() as isize - 1) as usize;
            (rows[j].key(), rows.len())
        };
        if n > 0 && self.selected.as_ref() != Some(&key) {
            self.selected = Some(key);
            self.scroll = 0;
        }
    }

    pub fn key(&mut self, k: KeyEvent) -> Action {
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        match k.code {
            KeyCode::Char('c') if ctrl => Action::Quit,
            KeyCode::Char('?') => {
                self.help = !self.help;
                Action::Redraw
            }
            KeyCode::Esc if self.help => {
                self.help = false;
                Action::Redraw
            }
            KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
            KeyCode::Up | KeyCode::Char('k') => {
                self.move_by(-1);
                Action::Redraw
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.move_by(1);
                Action::Redraw
            }
            // With the detail pane open, the pages are the pane's.
            KeyCode::PageUp if self.detail => {
                self.scroll = self.scroll.saturating_sub(10);
                Action::Redraw
            }
            KeyCode::PageDown if self.detail => {
                self.scroll = self.scroll.saturating_add(10);
                Action::Redraw
            }
            KeyCode::PageUp => {
                self.move_by(-10);
                Action::Redraw
            }
            KeyCode::PageDown => {
                self.move_by(10);
                Action::Redraw
            }
            KeyCode::Home | KeyCode::Char('g') => {
                self.move_by(isize::MIN / 2);
                Action::Redraw
            }
            KeyCode::End | KeyCode::Char('G') => {
                self.move_by(isize::MAX / 2);
                Action::Redraw
            }
            KeyCode::Enter | KeyCode::Tab | KeyCode::Char('d') => {
                self.detail = !self.detail;
                self.scroll = 0;
                Action::Redraw
            }
            KeyCode::Char('s') => {
                self.sort = self.sort.step(1);
                self.reverse = false;
                Action::Redraw
            }
            KeyCode::Char('S') => {
                self.sort = self.sort.step(-1);
                self.reverse = false;
                Action::Redraw
            }
            KeyCode::Char('r') => {
                self.reverse = !self.reverse;
                Action::Redraw
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => {
                self.paused = !self.paused;
                if !self.paused
                    && let Some(f) = self.held.take()
                {
                    self.frame = f;
                }
                Action::Redraw
            }
            _ => Action::Nothing,
        }
    }

    /// The order's name as the header shows it.
    pub fn order(&self) -> String {
        // Pid and name sort ascending by `cmp`; the figures descending.
        let ascending = self.sort.ascending() != self.reverse;
        format!("{} {}", self.sort.name(), if ascending { "asc" } else { "desc" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pid: u32, staged: f64, regs: f64) -> Row {
        Row {
            pid,
            comm: format!("p{pid}"),
            verdict: "-".into(),
            staged_per_s: staged,
            registrations_per_s: regs,
            ..Row::default()
        }
    }

    fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    fn app() -> App {
        let mut a = App::new("test".into(), "1s".into());
        let mut comm = row(2, 5.0, 0.0);
        comm.communicator = Some("0x1".into());
        a.update(Frame {
            rows: vec![row(1, 10.0, 0.0), row(2, 50.0, 1.0), comm, row(3, 0.0, 300.0)],
            ..Frame::default()
        });
        a
    }

    fn pids(a: &App) -> Vec<(u32, bool)> {
        a.ordered().iter().map(|r| (r.pid, r.communicator.is_some())).collect()
    }

    #[test]
    fn sort_keys_order_processes_and_keep_communicators_under_them() {
        let mut a = app();
        assert_eq!(
            pids(&a),
            [(2, false), (2, true), (1, false), (3, false)],
            "staged/s first"
        );
        a.key(key('s'));
        a.key(key('s'));
        a.key(key('s'));
        assert_eq!(a.sort, Sort::Registrations);
        assert_eq!(pids(&a), [(3, false), (2, false), (2, true), (1, false)]);
        a.key(key('r'));
        assert_eq!(pids(&a), [(1, false), (2, false), (2, true), (3, false)]);
        a.key(key('S'));
        assert_eq!(a.sort, Sort::Share);
        for _ in 0..3 {
            a.key(key('s'));
        }
        assert_eq!(a.sort, Sort::Pid);
        assert_eq!(a.order(), "pid asc");
        assert_eq!(pids(&a), [(1, false), (2, false), (2, true), (3, false)]);
    }

    #[test]
    fn selection_follows_the_row_and_pause_holds_the_frame() {
        let mut a = app();
        assert_eq!(a.selected_row().map(|r| r.pid), Some(2));
        a.key(KeyEvent::new(KeyCode::Down, KeyModifiers::NONE));
        a.key(KeyEvent::new(KeyCode::Down, KeyModifiers::NONE));
        assert_eq!(a.selected_row().map(|r| r.key()), Some((1, None)));
        a.key(key('s'));
        a.key(key('s'));
        a.key(key('s'));
        assert_eq!(a.selected_row().map(|r| r.pid), Some(1), "still pid 1 in another order");
        a.key(key('p'));
        assert!(a.paused);
        a.update(Frame::default());
        assert_eq!(a.frame.rows.len(), 4, "paused: the shown frame stays");
        a.key(key(' '));
        assert!(a.frame.rows.is_empty(), "resumed: the newest frame is shown");
        assert_eq!(a.key(key('q')), Action::Quit);
        assert_eq!(
            a.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
        assert_eq!(a.key(key('x')), Action::Nothing);
    }
}
