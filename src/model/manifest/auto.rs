//! `concurrency = "auto"`: a lane (or a tool's `[concurrency.per_tool]` entry) whose limit is
//! learned from what its backend answers, within bounds (`min`, `max`, `start`). The law that
//! moves it lives with the lanes (`run/store/learn.rs`); here it is read and checked.

use toml::de::{DeTable, DeValue};

use super::reader::Reader;

/// A learned limit's bounds: it starts at `start` and stays within `min ..= max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct AutoLimit {
    pub min: u32,
    pub max: u32,
    pub start: u32,
}

impl Default for AutoLimit {
    fn default() -> AutoLimit {
        AutoLimit {
            min: 1,
            max: 64,
            start: 4,
        }
    }
}

/// What a `concurrency` field says: a number, or "auto" with its bounds.
pub(super) type Limit = (Option<u32>, Option<AutoLimit>);

impl Reader<'_> {
    /// `concurrency` in `t` (`[lanes.NAME]`), with `min`, `max` and `start` beside it when it
    /// is "auto". An auto lane's `concurrency` is its ceiling (`max`).
    pub(super) fn lane_limit(&mut self, t: &DeTable<'_>, ctx: &str) -> Limit {
        let auto = match Self::entry(t, "concurrency").map(|(_, v)| v) {
            Some(v) if matches!(v.get_ref(), DeValue::String(_)) => {
                if !self.auto_word(v.get_ref(), v.span(), ctx) {
                    return (None, None);
                }
                true
            }
            _ => false,
        };
        if !auto {
            for key in ["min", "max", "start"] {
                if let Some((k, _)) = Self::entry(t, key) {
                    self.error(
                        k.span(),
                        format!("`{key}` in {ctx} bounds a learned limit"),
                        Some("set concurrency = \"auto\" beside it, or leave it out".into()),
                    );
                }
            }
            return (self.count_field(t, "concurrency", ctx), None);
        }
        self.bounds(t, ctx)
    }

    /// A `[concurrency.per_tool]` entry: a number, "auto", or `{ min, max, start }` (auto with
    /// bounds).
    pub(super) fn per_tool_limit(&mut self, v: &toml::Spanned<DeValue<'_>>, ctx: &str) -> Limit {
        match v.get_ref() {
            DeValue::String(_) if self.auto_word(v.get_ref(), v.span(), ctx) => {
                let a = AutoLimit::default();
                (Some(a.max), Some(a))
            }
            DeValue::String(_) => (None, None),
            DeValue::Table(t) => {
                self.check_keys(t, &["min", "max", "start"], ctx);
                self.bounds(t, ctx)
            }
            _ => (self.count(v, ctx), None),
        }
    }

    /// Whether `v` is the word "auto" (anything else is an error).
    fn auto_word(&mut self, v: &DeValue<'_>, span: std::ops::Range<usize>, ctx: &str) -> bool {
        if let DeValue::String(s) = v {
            if s.as_ref() == "auto" {
                return true;
            }
            self.error(
                span,
                format!("`concurrency` in {ctx} is \"{s}\"; it is a number or \"auto\""),
                crate::error::suggest(s, ["auto"]),
            );
        }
        false
    }

    /// `min`, `max` and `start` in `t`, checked against each other.
    fn bounds(&mut self, t: &DeTable<'_>, ctx: &str) -> Limit {
        let d = AutoLimit::default();
        let min = self.count_field(t, "min", ctx).unwrap_or(d.min);
        let max = self.count_field(t, "max", ctx).unwrap_or(d.max.max(min));
        let start = self
            .count_field(t, "start", ctx)
            .unwrap_or(d.start.clamp(min, max.max(min)));
        if min > max || start < min || start > max {
            let span = Self::entry(t, "start")
                .or_else(|| Self::entry(t, "max"))
                .or_else(|| Self::entry(t, "min"))
                .map_or(0..0, |(k, _)| k.span());
            self.error(
                span,
                format!("the bounds in {ctx} are min {min}, start {start}, max {max}; they must be min ≤ start ≤ max"),
                None,
            );
            return (None, None);
        }
        let a = AutoLimit { min, max, start };
        (Some(max), Some(a))
    }
}
