//! The live display on stderr (indicatif): an overall line (done/total, ok, failed, elapsed)
//! one line of totals (calls running now, calls waiting for a lane, the lanes in use that have
//! no limit), and one line per limited (or rate-limited) lane in use with permits held /
//! limit and calls queued behind it.
//!
//! It is one [`Reporter`] among others: it learns everything from events and knows nothing of
//! scheduling. Lane lines appear the first time a lane is waited on or held.

use std::collections::{BTreeSet, HashSet};
use std::io::{self, Write};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

use super::Reporter;
use crate::events::{Event, LaneInfo, Status};

struct LaneLine {
    info: LaneInfo,
    held: u64,
    queued: u64,
    /// Calls holding a permit but waiting for a rate token.
    token_waiting: u64,
    /// Permits of a shared lane other runs held when last looked at.
    elsewhere: Option<u64>,
    /// Which way a learned lane's limit last moved: `↑` or `↓`.
    moved: &'static str,
    bar: Option<ProgressBar>,
}

/// The display on screen now, for [`suspend`]: stderr's terminal is one per process.
static ON_SCREEN: std::sync::Mutex<Option<MultiProgress>> = std::sync::Mutex::new(None);

/// Run `f` (a question on the terminal) with the live display taken off the screen, and put
/// it back after: nothing redraws over the question while it waits for its answer.
pub(crate) fn suspend<R>(f: impl FnOnce() -> R) -> R {
    let shown = ON_SCREEN.lock().ok().and_then(|m| m.clone());
    match shown {
        Some(multi) => multi.suspend(f),
        None => f(),
    }
}

/// The live display.
pub(crate) struct Progress {
    multi: MultiProgress,
    overall: ProgressBar,
    lanes: Vec<LaneLine>,
    /// The totals line: calls invoked and not finished, calls waiting for a lane, and the
    /// lanes without a limit in use (not drawn one by one).
    totals: ProgressBar,
    running: HashSet<usize>,
    waiting: HashSet<usize>,
    unlimited: BTreeSet<String>,
    ok: u64,
    failed: u64,
}

/// Writes ANSI to stderr at the terminal's width (100 when stderr is not a terminal:
/// `--progress always`).
#[derive(Debug)]
struct RawStderr;

impl TermLike for RawStderr {
    fn width(&self) -> u16 {
        super::term::size(2).map_or(100, |(cols, _)| cols)
    }
    fn height(&self) -> u16 {
        super::term::size(2).map_or(20, |(_, rows)| rows)
    }
    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}A")?;
        }
        Ok(())
    }
    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}B")?;
        }
        Ok(())
    }
    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}C")?;
        }
        Ok(())
    }
    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}D")?;
        }
        Ok(())
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        writeln!(io::stderr(), "{s}")
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        write!(io::stderr(), "{s}")
    }
    fn clear_line(&self) -> io::Result<()> {
        write!(io::stderr(), "\r\x1b[2K")
    }
    fn flush(&self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl Default for Progress {
    fn default() -> Progress {
        Progress::new()
    }
}

impl Progress {
    /// Drawn on stderr, terminal or not (`--progress auto` chooses it only for a terminal).
    pub(crate) fn new() -> Progress {
        let target = ProgressDrawTarget::term_like_with_hz(Box::new(RawStderr), 10);
        let multi = MultiProgress::with_draw_target(target);
        let overall = multi.add(ProgressBar::new(0));
        overall.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} calls · {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        overall.enable_steady_tick(Duration::from_millis(100));
        if let Ok(mut m) = ON_SCREEN.lock() {
            *m = Some(multi.clone());
        }
        let totals = multi.add(ProgressBar::new(0));
        totals.set_style(
            ProgressStyle::with_template("  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Progress {
            multi,
            overall,
            lanes: Vec::new(),
            totals,
            running: HashSet::new(),
            waiting: HashSet::new(),
            unlimited: BTreeSet::new(),
            ok: 0,
            failed: 0,
        }
    }

    fn refresh_lane(&mut self, lane: usize) {
        let multi = &self.multi;
        let Some(l) = self.lanes.get_mut(lane) else {
            return;
        };
        if l.info.limit.is_none() && l.info.rate.is_none() {
            // Counted in the totals line, not drawn.
            if self.unlimited.insert(l.info.name.clone()) {
                self.refresh_totals();
            }
            return;
        }
        let bar = l.bar.get_or_insert_with(|| {
            let b = multi.add(ProgressBar::new(0));
            b.set_style(
                ProgressStyle::with_template("  {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b
        });
        let limit = l
            .info
            .limit
            .map_or_else(|| "∞".to_string(), |n| format!("{n}{}", l.moved));
        let rate = l
            .info
            .rate
            .as_ref()
            .map(|r| format!(" · rate {r}, {} waiting for a token", l.token_waiting))
            .unwrap_or_default();
        let others = l
            .elsewhere
            .map(|n| format!(" · {n} held by other runs"))
            .unwrap_or_default();
        bar.set_message(format!(
            "{:<28} {:>4}/{limit:<4} held · {} queued{others}{rate}",
            l.info.name, l.held, l.queued
        ));
    }

    fn refresh_totals(&self) {
        let free = if self.unlimited.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = self.unlimited.iter().map(String::as_str).collect();
            format!(" · no limit on {}", names.join(", "))
        };
        self.totals.set_message(format!(
            "{} running · {} waiting for a lane{free}",
            self.running.len(),
            self.waiting.len()
        ));
    }

    /// The run is over: take the display off the screen.
    fn finished(&mut self, outcome: crate::events::Outcome) {
        self.overall.finish_and_clear();
        self.totals.finish_and_clear();
        for l in &self.lanes {
            if let Some(b) = &l.bar {
                b.finish_and_clear();
            }
        }
        let _ = self.multi.clear();
        // indicatif leaves the cursor at the end of its last line, which fills the terminal's
        // width; the `^C` a terminal echoes wrapped it onto a new line, so the clear above
        // began one line low and left the top line standing.
        if outcome == crate::events::Outcome::Interrupted && super::term::echoes_ctrl_c(2) {
            let _ = write!(io::stderr(), "\x1b[1A\r\x1b[2K");
        }
        if let Ok(mut m) = ON_SCREEN.lock() {
            *m = None;
        }
    }

    fn refresh_overall(&self) {
        self.overall
            .set_message(format!("{} ok · {} failed", self.ok, self.failed));
    }
}

impl Reporter for Progress {
    fn handle(&mut self, event: &Event) {
        match event {
            Event::RunStarted { total, lanes, .. } => {
                self.overall.set_length(*total as u64);
                self.lanes = lanes
                    .iter()
                    .map(|info| LaneLine {
                        info: info.clone(),
                        held: 0,
                        queued: 0,
                        token_waiting: 0,
                        elsewhere: None,
                        moved: "",
                        bar: None,
                    })
                    .collect();
                self.refresh_overall();
            }
            Event::LaneWaiting { lane, call, .. } => {
                if let Some(l) = self.lanes.get_mut(*lane) {
                    l.queued += 1;
                }
                self.waiting.insert(*call);
                self.refresh_lane(*lane);
                self.refresh_totals();
            }
            Event::LaneAcquired {
                lane, weight, call, ..
            } => {
                if let Some(l) = self.lanes.get_mut(*lane) {
                    l.queued = l.queued.saturating_sub(1);
                    l.held += u64::from(*weight);
                }
                self.waiting.remove(call);
                self.refresh_lane(*lane);
                self.refresh_totals();
            }
            Event::LaneReleased {
                lane,
                weight,
                held,
                call,
            } => {
                if !*held {
                    self.waiting.remove(call);
                    self.refresh_totals();
                }
                if let Some(l) = self.lanes.get_mut(*lane) {
                    if *held {
                        l.held = l.held.saturating_sub(u64::from(*weight));
                    } else {
                        l.queued = l.queued.saturating_sub(1);
                    }
                }
                self.refresh_lane(*lane);
            }
            Event::LaneShared { lane, held } => {
                if let Some(l) = self.lanes.get_mut(*lane) {
                    l.elsewhere = Some(*held);
                }
                self.refresh_lane(*lane);
            }
            Event::LaneLimit { lane, from, to, .. } => {
                if let Some(l) = self.lanes.get_mut(*lane) {
                    l.info.limit = Some(*to);
                    l.moved = if to > from { "↑" } else { "↓" };
                }
                self.refresh_lane(*lane);
            }
            Event::RateWaiting { lane, waiting, .. } => {
                if let Some(l) = self.lanes.get_mut(*lane) {
                    if *waiting {
                        l.token_waiting += 1;
                    } else {
                        l.token_waiting = l.token_waiting.saturating_sub(1);
                    }
                }
                self.refresh_lane(*lane);
            }
            Event::RunExtended { total } => self.overall.set_length(*total as u64),
            Event::CallStarted { call, .. } => {
                self.running.insert(*call);
                self.refresh_totals();
            }
            Event::CallFinished { result } => {
                self.running.remove(&result.index);
                self.waiting.remove(&result.index);
                self.refresh_totals();
                if result.status == Status::Ok {
                    self.ok += 1;
                } else {
                    self.failed += 1;
                }
                self.overall.inc(1);
                self.refresh_overall();
            }
            Event::RunFinished { outcome, .. } => self.finished(*outcome),
        }
    }
}
