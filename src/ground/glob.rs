//! Globs over names and URIs (`allow`, `deny`, approval and cache patterns): `*` matches any
//! run of characters (`/` included), `?` any one character; everything else is itself.

/// Whether `text` matches `pattern` as a whole.
pub(crate) fn matches(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // The last `*` seen, and where in the text it began to match.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                // Let the last `*` take one more character, and try again after it.
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether any of `patterns` matches `text`.
pub(crate) fn any(patterns: &[String], text: &str) -> bool {
    patterns.iter().any(|p| matches(p, text))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn stars_and_marks_match_runs_and_single_characters() {
        assert!(matches("*", ""));
        assert!(matches("*", "anything/at all"));
        assert!(matches("get_*", "get_user"));
        assert!(!matches("get_*", "set_user"));
        assert!(matches("*delete*", "bulk_delete_rows"));
        assert!(matches("file:///docs/*.md", "file:///docs/a/b.md"));
        assert!(!matches("file:///docs/*.md", "file:///docs/a.txt"));
        assert!(matches("a?c", "abc"));
        assert!(!matches("a?c", "ac"));
        assert!(matches("a*b*c", "aXXbYYbc"));
        assert!(!matches("a*b*c", "aXXbYY"));
        assert!(matches("ui://*", "ui://widget/x.html"));
        assert!(!matches("echo", "echo2"));
    }
}
