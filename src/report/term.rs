//! The terminal's size, for what is drawn to fit it: the live display on stderr and the
//! tables on stdout. `None` when the descriptor is not a terminal.

/// (columns, rows) of the terminal on descriptor `fd`.
pub fn size(fd: i32) -> Option<(u16, u16)> {
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
pub fn stdout_width() -> Option<u16> {
    let (cols, _) = size(1)?;
    let set = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    Some(set.unwrap_or(cols))
}
