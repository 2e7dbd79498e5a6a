//! What a backend says of its rate quota in its answer's headers: the IETF `RateLimit` fields
//! (`RateLimit: "default";r=50;t=30`, and the older `RateLimit: limit=100, remaining=50,
//! reset=30` and `RateLimit-Remaining`/`-Reset`), and the common `X-RateLimit-Remaining` /
//! `X-RateLimit-Reset` (seconds to go, or a Unix time in seconds or milliseconds). A call's
//! lanes use it ([`Lanes::quota`](crate::run::LaneStore)): a window's quota spent pauses them
//! until it resets, for every process sharing them. Nothing in a body is read.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;

/// The calls the backend still takes before its window resets, and when that is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quota {
    pub(crate) remaining: u64,
    pub(crate) reset: Duration,
}

/// The longest a quota's reset is believed (a wrong header must not park a lane for a day).
const LONGEST_RESET: Duration = Duration::from_secs(3600);

/// The quota `headers` state, if they state both what remains and when it resets.
pub(crate) fn of(headers: &HeaderMap) -> Option<Quota> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (remaining, reset) = match text("ratelimit") {
        Some(v) => structured(v)?,
        None => {
            let (r, t) = ["ratelimit-", "x-ratelimit-"].into_iter().find_map(|p| {
                let r = text(&format!("{p}remaining"))?;
                let t = text(&format!("{p}reset"))?;
                Some((r, t))
            })?;
            (r.trim().parse().ok()?, reset_of(t.trim())?)
        }
    };
    Some(Quota {
        remaining,
        reset: reset.min(LONGEST_RESET),
    })
}

/// `"default";r=50;t=30` (the current draft), or `limit=100, remaining=50, reset=30` (an
/// older one): (remaining, reset). The first policy is read.
fn structured(v: &str) -> Option<(u64, Duration)> {
    let first = v.split(',').collect::<Vec<_>>();
    let params: Vec<(&str, &str)> = if v.contains(";r=") || v.contains(";t=") {
        first[0]
            .split(';')
            .filter_map(|p| p.trim().split_once('='))
            .collect()
    } else {
        first
            .iter()
            .filter_map(|p| p.trim().split_once('='))
            .collect()
    };
    let get = |keys: [&str; 2]| {
        params
            .iter()
            .find(|(k, _)| keys.contains(&k.trim()))
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
    };
    let remaining = get(["r", "remaining"])?;
    let reset = get(["t", "reset"])?;
    Some((remaining, Duration::from_secs(reset)))
}

/// A reset: seconds to go, or a Unix time (seconds, or milliseconds).
fn reset_of(v: &str) -> Option<Duration> {
    let n: f64 = v
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    let secs = if n > 1e12 {
        n / 1000.0 - now
    } else if n > 1e9 {
        n - now
    } else {
        n
    };
    Some(Duration::from_secs_f64(secs.max(0.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("header value"));
        }
        h
    }

    fn q(remaining: u64, secs: u64) -> Option<Quota> {
        Some(Quota {
            remaining,
            reset: Duration::from_secs(secs),
        })
    }

    #[test]
    fn the_ietf_fields_in_both_drafts_and_the_common_ones_are_read() {
        let h = headers(&[("ratelimit", "\"default\";r=0;t=30")]);
        assert_eq!(of(&h), q(0, 30));
        let h = headers(&[("ratelimit", "limit=100, remaining=7, reset=12")]);
        assert_eq!(of(&h), q(7, 12));
        let h = headers(&[("ratelimit-remaining", "3"), ("ratelimit-reset", "9")]);
        assert_eq!(of(&h), q(3, 9));
        let h = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "2")]);
        assert_eq!(of(&h), q(0, 2));
    }

    #[test]
    fn a_reset_as_a_unix_time_is_read_and_a_wild_one_is_capped() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let at = (now + 20).to_string();
        let h = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", &at)]);
        let got = of(&h).map(|q| q.reset.as_secs());
        assert!(matches!(got, Some(18..=20)), "{got:?}");
        let h = headers(&[("ratelimit", "\"d\";r=0;t=999999")]);
        assert_eq!(of(&h).map(|q| q.reset), Some(LONGEST_RESET));
    }

    #[test]
    fn half_a_quota_or_garbage_says_nothing() {
        for pairs in [
            vec![("x-ratelimit-remaining", "0")],
            vec![
                ("x-ratelimit-remaining", "lots"),
                ("x-ratelimit-reset", "2"),
            ],
            vec![("x-ratelimit-remaining", "1"), ("x-ratelimit-reset", "-5")],
            vec![("ratelimit", "nonsense")],
        ] {
            assert_eq!(of(&headers(&pairs)), None, "{pairs:?}");
        }
    }
}
