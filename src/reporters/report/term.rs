//! The terminal's size, for what is drawn to fit it: the live display on stderr and the
//! tables on stdout. `None` when the descriptor is not a terminal.

/// (columns, rows) of the terminal on descriptor `fd`.
pub(crate) fn size(fd: i32) -> Option<(u16, u16)> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills the winsize we own; a failure is reported by the return value.
    let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some((ws.ws_col, ws.ws_row.max(1)))
}

/// The width of stdout's terminal, or `None` when stdout is not one (tables keep their
/// natural width in a pipe or file). `COLUMNS` overrides it when stdout is a terminal.
pub(crate) fn stdout_width() -> Option<u16> {
    let (cols, _) = size(1)?;
    let set = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    Some(set.unwrap_or(cols))
}

/// Fit `t` to stdout's terminal (long cells wrap), or keep its natural width when stdout is
/// not a terminal, or one too narrow to believe.
pub(crate) fn fit(t: &mut comfy_table::Table) {
    use comfy_table::ContentArrangement;
    match stdout_width() {
        Some(w) if w >= 20 => {
            t.set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(w);
        }
        _ => {
            t.set_content_arrangement(ContentArrangement::Disabled);
        }
    }
}

/// Whether a Ctrl-C on the terminal of `fd` is echoed there as `^C`: the terminal makes
/// signals of it and echoes control characters, and this process is in its foreground.
pub(crate) fn echoes_ctrl_c(fd: i32) -> bool {
    // SAFETY: tcgetattr fills the termios we own; tcgetpgrp and getpgrp only read.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(fd, &mut t) != 0 {
            return false;
        }
        let echoed = libc::ISIG | libc::ECHO | libc::ECHOCTL;
        (t.c_lflag & echoed) == echoed && libc::tcgetpgrp(fd) == libc::getpgrp()
    }
}

/// A table of `header` and `rows` for stdout: at its natural width in a pipe; on a terminal
/// narrower than that, the columns named in `drop` go first (in that order, until it fits),
/// then long cells wrap.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>], drop: &[&str]) -> comfy_table::Table {
    let build = |keep: &[bool]| {
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
            .force_no_tty()
            .set_content_arrangement(comfy_table::ContentArrangement::Disabled);
        let kept = |row: &[String]| -> Vec<String> {
            row.iter()
                .zip(keep)
                .filter(|(_, k)| **k)
                .map(|(c, _)| c.clone())
                .collect()
        };
        let names: Vec<String> = header.iter().map(|h| h.to_string()).collect();
        t.set_header(kept(&names));
        for r in rows {
            t.add_row(kept(r));
        }
        t
    };
    let mut keep = vec![true; header.len()];
    if let Some(w) = stdout_width().filter(|w| *w >= 20) {
        for name in drop {
            if natural_width(&build(&keep)) <= usize::from(w) {
                break;
            }
            if let Some(i) = header.iter().position(|h| h == name) {
                keep[i] = false;
            }
        }
    }
    let mut t = build(&keep);
    fit(&mut t);
    t
}

fn natural_width(t: &comfy_table::Table) -> usize {
    let text = t.to_string();
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}
