//! W3C trace context for a run: the trace a run belongs to (the agent's, from `TRACEPARENT`,
//! or a new one), the run's own span, and the `traceparent` each call passes on to its tool
//! (`traceparent` header, `TRACEPARENT` variable, `_meta.traceparent`) so the tool's own spans
//! join the trace. A call's span id is derived from the run's span and the call id, so the
//! id a tool was given is the id the exported call span has.

/// The trace context of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: u128,
    /// The span the run is a child of (the agent's, from `TRACEPARENT`).
    pub parent: Option<u64>,
    /// The run's own span.
    pub run_span: u64,
    pub flags: u8,
    /// The run's spans are exported: calls pass on their own span. Otherwise the incoming
    /// `traceparent` is passed on as it came.
    pub exported: bool,
}

/// An incoming `traceparent`: version 00, a non-zero trace id and span id, flags.
pub(crate) fn parse(s: &str) -> Option<(u128, u64, u8)> {
    let parts: Vec<&str> = s.trim().split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else {
        return None;
    };
    let hex = |t: &str, n: usize| {
        t.len() == n
            && t.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    if !(hex(version, 2) && *version != "ff" && hex(trace, 32) && hex(span, 16) && hex(flags, 2)) {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok().filter(|t| *t != 0)?;
    let span = u64::from_str_radix(span, 16).ok().filter(|s| *s != 0)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((trace, span, flags))
}

impl TraceContext {
    /// A run's context: a child of `incoming` (a `TRACEPARENT`) when it parses, else a new
    /// trace. `None` when there is neither an export nor an incoming trace to pass on.
    pub fn new(incoming: Option<&str>, exported: bool) -> Option<TraceContext> {
        let parsed = incoming.and_then(parse);
        if parsed.is_none() && !exported {
            return None;
        }
        let (trace_id, parent, flags) = match parsed {
            Some((t, s, f)) => (t, Some(s), f),
            None => (fastrand::u128(1..), None, 1),
        };
        Some(TraceContext {
            trace_id,
            parent,
            run_span: fastrand::u64(1..),
            flags,
            exported,
        })
    }

    /// The span id of call `call_id` (never zero).
    pub fn call_span(&self, call_id: &str) -> u64 {
        let h = crate::hash::fnv(call_id.as_bytes()) ^ self.run_span;
        // SplitMix64's finaliser: neighbouring ids give unrelated span ids.
        let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)).max(1)
    }

    /// What call `call_id` passes on to its tool: its own span when the run's spans are
    /// exported, else the agent's span it came with.
    pub fn traceparent(&self, call_id: &str) -> String {
        let span = if self.exported {
            self.call_span(call_id)
        } else {
            self.parent.unwrap_or(self.run_span)
        };
        format!("00-{:032x}-{span:016x}-{:02x}", self.trace_id, self.flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_is_read_strictly() {
        assert_eq!(
            parse(AGENT),
            Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, 1))
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn calls_pass_on_their_own_span_only_when_it_is_exported() {
        let exported = TraceContext::new(Some(AGENT), true).unwrap();
        assert_eq!(exported.parent, Some(0x00f067aa0ba902b7));
        let tp = exported.traceparent("c1");
        assert!(tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        assert_eq!(
            tp,
            format!(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-{:016x}-01",
                exported.call_span("c1")
            )
        );
        assert_ne!(exported.call_span("c1"), exported.call_span("c2"));
        let passed = TraceContext::new(Some(AGENT), false).unwrap();
        assert_eq!(passed.traceparent("c1"), AGENT);
        assert!(TraceContext::new(None, false).is_none());
        assert!(TraceContext::new(Some("junk"), false).is_none());
        let fresh = TraceContext::new(None, true).unwrap();
        assert_eq!(fresh.parent, None);
        assert_ne!(fresh.trace_id, 0);
    }
}
