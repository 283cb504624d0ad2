//! `gdrtrace top`'s view: a full-screen table of the traced processes and
//! their communicators, refreshed each interval, with a detail pane
//! (docs/top.md). The view is fed frames (`feed`: made from the judged
//! report of the trace so far, the one adapter to the rest of the tracer)
//! over a channel, and runs on a thread of its own, so the tracing loop
//! never waits for the terminal and keys are answered while it drains.
pub mod app;
pub mod columns;
pub mod feed;
pub mod term;
pub mod view;

use std::{sync::mpsc, time::Duration};

use ratatui::crossterm::event::{self, Event, KeyEventKind};

use self::{
    app::{Action, App},
    feed::Frame,
};

/// What the tracing side tells the view.
#[derive(Debug)]
pub enum Msg {
    /// A refresh.
    Frame(Frame),
    /// Tracing (or the replay) ended: why, the last frame (the final
    /// report's), and whether the view quits now (a signal, `--duration`)
    /// or stays until `q` (the targets exited, the replay is over).
    Ended {
        why: String,
        last: Option<Frame>,
        quit: bool,
    },
}

/// How long the view waits for a key before it looks for frames.
const POLL: Duration = Duration::from_millis(50);

/// Shows the view on this thread until the user quits or the tracing side
/// says so, then calls `on_quit` (which stops the tracing side, if it still
/// runs); the terminal is restored before this returns, however it ends.
pub fn show(app: App, frames: mpsc::Receiver<Msg>, on_quit: impl Fn()) -> std::io::Result<()> {
    let r = run(app, &frames);
    on_quit();
    r
}

fn run(mut app: App, frames: &mpsc::Receiver<Msg>) -> std::io::Result<()> {
    let mut screen = term::Screen::enter()?;
    let mut dirty = true;
    loop {
        if dirty {
            screen.terminal.draw(|f| view::draw(f, &app))?;
            dirty = false;
        }
        if event::poll(POLL)? {
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => match app.key(k) {
                    Action::Quit => return Ok(()),
                    Action::Redraw => dirty = true,
                    Action::Nothing => {}
                },
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
        loop {
            match frames.try_recv() {
                Ok(Msg::Frame(f)) => {
                    app.update(f);
                    dirty = true;
                }
                Ok(Msg::Ended { why, last, quit }) => {
                    if quit {
                        return Ok(());
                    }
                    app.end(why, last);
                    dirty = true;
                }
                Err(mpsc::TryRecvError::Empty) => break,
                // The tracing side is gone without a word (an error): the
                // view ends with it.
                Err(mpsc::TryRecvError::Disconnected) if app.ended.is_none() => return Ok(()),
                Err(mpsc::TryRecvError::Disconnected) => break,
            }
        }
    }
}
