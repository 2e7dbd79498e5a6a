//! One shaping per protocol version: what a client's protocol version requires of the answers
//! rmcp's handler gives it is added in this one place.
//!
//! - Every result a `2026-07-28` client reads carries `resultType: "complete"` where that
//!   version defines it (lists, reads, prompts, completions, calls): a whole server's answers
//!   come from upstreams that speak older versions, and that version's SDKs reject a result
//!   without it. Each answer is made [`Complete`] here; rmcp strips the field again for a
//!   client of an older version.
//! - The tasks' requests a `2025-11-25` client sends that rmcp does not model (`tasks/list`,
//!   `tasks/result`) are the gateway's tasks', over stdio as over HTTP ([`task_request`]).
//!
//! The book's table "method × protocol version" lists what the gateway does with each
//! method.

use rmcp::model::{
    CallToolResult, CompleteResult, GetPromptResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, ReadResourceResult,
    ResultType,
};

use super::tasks::Asked;

/// A result that says it is complete (`resultType`), as a `2026-07-28` client reads it.
pub(super) trait Complete {
    #[must_use]
    fn complete(self) -> Self;
}

macro_rules! complete {
    ($($t:ty),*) => {$(
        impl Complete for $t {
            fn complete(mut self) -> Self {
                self.result_type.get_or_insert(ResultType::COMPLETE);
                self
            }
        }
    )*};
}

complete!(
    CallToolResult,
    CompleteResult,
    GetPromptResult,
    ListPromptsResult,
    ListResourceTemplatesResult,
    ListResourcesResult,
    ListToolsResult,
    ReadResourceResult
);

/// A tasks request rmcp does not model (`tasks/list`, `tasks/result`).
pub(super) fn task_request(request: &rmcp::model::CustomRequest) -> Option<Asked> {
    let id = || {
        let p = request.params.as_ref()?;
        p.get("taskId")?.as_str().map(str::to_string)
    };
    match request.method.as_str() {
        "tasks/list" => Some(Asked::List),
        "tasks/result" => id().map(Asked::Result),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("a result")
    }

    #[test]
    fn every_result_a_modern_client_reads_is_complete() {
        let results = [
            serde_json::to_value(of::<ListResourcesResult>(json!({"resources": []})).complete()),
            serde_json::to_value(of::<ListPromptsResult>(json!({"prompts": []})).complete()),
            serde_json::to_value(of::<ReadResourceResult>(json!({"contents": []})).complete()),
            serde_json::to_value(
                of::<CompleteResult>(json!({"completion": {"values": []}})).complete(),
            ),
            serde_json::to_value(of::<GetPromptResult>(json!({"messages": []})).complete()),
        ];
        for r in results {
            let v = r.expect("it serializes");
            assert_eq!(v["resultType"], "complete", "{v}");
        }
    }

    #[test]
    fn the_tasks_requests_rmcp_does_not_model_are_the_tasks() {
        let req = |v: serde_json::Value| -> rmcp::model::CustomRequest { of(v) };
        let list = req(json!({"method": "tasks/list", "params": {}}));
        assert_eq!(task_request(&list), Some(Asked::List));
        let result = req(json!({"method": "tasks/result", "params": {"taskId": "t"}}));
        assert_eq!(task_request(&result), Some(Asked::Result("t".into())));
        let bare = req(json!({"method": "tasks/result", "params": {}}));
        assert_eq!(task_request(&bare), None);
    }
}
