//! A resource URI as the gateway checks it and as its server reads it: parsed and normalized
//! once at the door, so every glob, role, cache key and the upstream see one string.
//!
//! Normalization is RFC 3986 §6.2.2, by `fluent-uri`: scheme and host in lower case,
//! percent-encoding of unreserved characters decoded (and the rest in upper-case hex), dot
//! segments removed — `%2e%2e` included. What a server did not offer is not forwarded: a URI
//! must be one it listed, or match one of its resource templates ([`Template`], RFC 6570)
//! with every variable in one plain form — a value a server may read as a number is taken
//! only as that number is written (`1`, not `01`, `+1` or `1.0`), so a policy written for
//! one reading cannot be passed by another.

/// The longest URI taken (longer: refused, and never echoed whole).
pub(super) const MAX_URI: usize = 4096;

/// Why a URI is not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fault {
    TooLong,
    Malformed(String),
    /// A template variable's value that reads as a number in more than one way.
    Ambiguous {
        value: String,
        plain: String,
    },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::TooLong => write!(f, "a resource URI is at most {MAX_URI} bytes"),
            Fault::Malformed(why) => write!(f, "not a URI: {why}"),
            Fault::Ambiguous { value, plain } => write!(
                f,
                "`{value}` reads as the number {plain}; ask for it as `{plain}`"
            ),
        }
    }
}

/// `uri` normalized (RFC 3986 §6.2.2).
pub(super) fn normalized(uri: &str) -> Result<String, Fault> {
    if uri.len() > MAX_URI {
        return Err(Fault::TooLong);
    }
    let parsed = fluent_uri::Iri::parse(uri).map_err(|e| Fault::Malformed(e.to_string()))?;
    Ok(parsed.normalize().into_string())
}

/// A resource template, for matching URIs against it: RFC 6570's expressions made capture
/// groups of one regular expression (matched in linear time, whatever a client sends).
#[derive(Debug, Clone)]
pub(super) struct Template {
    re: regex::Regex,
}

impl Template {
    /// `None`: not a template (an unclosed brace).
    pub(super) fn parse(template: &str) -> Option<Template> {
        let mut re = String::from("^");
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            re.push_str(&regex::escape(&rest[..open]));
            let close = rest[open..].find('}')? + open;
            let op = rest[open + 1..close].chars().next().unwrap_or(' ');
            re.push_str(match op {
                // Reserved expansion: anything, as little as lets the rest match.
                '+' => "([^#]*?)",
                // The expressions that begin with their operator, or expand to nothing.
                '#' => "((?:#.*)?)",
                '?' => r"((?:\?[^#]*)?)",
                '&' => "((?:&[^#]*)?)",
                '/' => "((?:/[^?#]*)?)",
                '.' => r"((?:\.[^/?#]*)?)",
                ';' => "((?:;[^/?#]*)?)",
                // A simple value: inside one segment.
                _ => "([^/?#]*)",
            });
            rest = &rest[close + 1..];
        }
        re.push_str(&regex::escape(rest));
        re.push('$');
        regex::Regex::new(&re).ok().map(|re| Template { re })
    }

    /// The values of the template's expressions when `uri` matches it (`None`: it does not).
    pub(super) fn matches(&self, uri: &str) -> Option<Vec<String>> {
        let caps = self.re.captures(uri)?;
        Some(
            (caps.iter().skip(1))
                .map(|m| m.map_or_else(String::new, |m| m.as_str().to_string()))
                .collect(),
        )
    }
}

/// Refuse a template variable's `value` that reads as a number but is not written as that
/// number plainly is (`01`, `+1`, `1.0`, `1e0`, ` 1`).
pub(super) fn plain(value: &str) -> Result<(), Fault> {
    let decoded = percent_decoded(value);
    let Ok(n) = decoded.trim().parse::<f64>() else {
        return Ok(());
    };
    if !n.is_finite() || !decoded.bytes().any(|b| b.is_ascii_digit()) {
        return Ok(());
    }
    let written = if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    };
    if written == value {
        return Ok(());
    }
    Err(Fault::Ambiguous {
        value: value.to_string(),
        plain: written,
    })
}

/// `value` with its `%XX` escapes decoded (a bad escape kept as written).
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_encodings_and_case_become_one_uri() {
        let n = |u: &str| normalized(u).expect("a URI");
        let want = "demo://resource/dynamic/text/1";
        for u in [
            "demo://resource/static/../dynamic/text/1",
            "demo://resource/static/%2e%2e/dynamic/text/1",
            "demo://resource/static/%2E%2E/dynamic/./text/1",
            "DEMO://Resource/dynamic/text/1",
            "demo://resource/dynamic/%74ext/1",
        ] {
            assert_eq!(n(u), want, "{u}");
        }
        assert_eq!(n("ev+demo://resource/static/../x"), "ev+demo://resource/x");
        assert!(matches!(normalized("no scheme"), Err(Fault::Malformed(_))));
        let long = format!("demo://x/{}", "a".repeat(MAX_URI));
        assert_eq!(normalized(&long), Err(Fault::TooLong));
    }

    #[test]
    fn a_template_matches_its_uris_and_gives_their_values() {
        let t = Template::parse("demo://resource/dynamic/text/{resourceId}").expect("a template");
        assert_eq!(
            t.matches("demo://resource/dynamic/text/1"),
            Some(vec!["1".to_string()])
        );
        assert_eq!(t.matches("demo://resource/dynamic/text/1/2"), None);
        assert_eq!(t.matches("demo://resource/static/text/1"), None);
        let q = Template::parse("file:///{+path}{?rev}").expect("a template");
        let got = q.matches("file:///a/b/c.md?rev=3").expect("a match");
        assert_eq!(got, ["a/b/c.md", "?rev=3"]);
        assert_eq!(q.matches("file:///a.md").expect("a match"), ["a.md", ""]);
        let two = Template::parse("x://{a}-{b}").expect("a template");
        assert_eq!(
            two.matches("x://p-q-r"),
            Some(vec!["p-q".to_string(), "r".to_string()])
        );
        assert!(Template::parse("x://{open").is_none());
        // A long hostile URI against a template of wide expressions is decided at once.
        let wide = Template::parse("x://{+a}/{+b}/{+c}/end").expect("a template");
        let long = format!("x://{}", "/a".repeat(MAX_URI / 2));
        assert_eq!(wide.matches(&long), None);
    }

    #[test]
    fn a_value_read_as_a_number_is_taken_only_as_written_plainly() {
        for ok in [
            "1", "42", "-3", "1.5", "abc", "1a", "nan", "inf", "", "v1.0",
        ] {
            assert_eq!(plain(ok), Ok(()), "{ok}");
        }
        for bad in ["01", "+1", "1.0", "1e0", "%31.0", "-0", "00"] {
            assert!(matches!(plain(bad), Err(Fault::Ambiguous { .. })), "{bad}");
        }
        let Err(e) = plain("01") else { panic!() };
        assert_eq!(
            e.to_string(),
            "`01` reads as the number 1; ask for it as `1`"
        );
    }
}
