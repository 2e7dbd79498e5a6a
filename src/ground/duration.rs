//! Durations as users write them (`250ms`, `5s`, `2m`, `1.5s`) and as we print them.

use std::time::Duration;

/// Parse `250ms`, `5s`, `1.5s`, `2m`, `1h`, or any humantime form (`1m 30s`).
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    // Fractions ("1.5s", "0.25m") are common in hand-written files; humantime rejects them.
    for (suffix, scale) in [("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)] {
        if let Some(num) = t.strip_suffix(suffix) {
            if num.contains('.') {
                if let Ok(v) = num.trim().parse::<f64>() {
                    return from_secs_f64(v * scale).ok_or_else(|| bad(text));
                }
            }
        }
    }
    humantime::parse_duration(t).map_err(|_| bad(text))
}

fn bad(text: &str) -> String {
    format!("`{text}` is not a duration (write it like `250ms`, `5s` or `2m`)")
}

/// Seconds as a duration, refusing negatives, NaN and absurd sizes.
pub(crate) fn from_secs_f64(secs: f64) -> Option<Duration> {
    if secs.is_finite() && (0.0..=1.0e9).contains(&secs) {
        Some(Duration::from_secs_f64(secs))
    } else {
        None
    }
}

/// Print a duration the way SPEC writes them: `0ms`, `250ms`, `1.25s`, `2m05s`.
pub(crate) fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let s = d.as_secs_f64();
        let text = format!("{s:.2}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        format!("{text}s")
    } else {
        let secs = d.as_secs();
        format!("{}m{:02}s", secs / 60, secs % 60)
    }
}

/// Milliseconds to the nearest whole millisecond, for result fields.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse("1m 30s").unwrap(), Duration::from_secs(90));
        assert!(parse("fast").is_err());
        assert!(parse("-1s").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn formats_like_the_spec() {
        assert_eq!(format(Duration::from_millis(250)), "250ms");
        assert_eq!(format(Duration::from_millis(1250)), "1.25s");
        assert_eq!(format(Duration::from_secs(5)), "5s");
        assert_eq!(format(Duration::from_secs(125)), "2m05s");
    }
}
