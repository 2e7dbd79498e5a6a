//! A protocol fault — what a client sent that the gateway will not take, or an upstream's
//! refusal passed on — as one enum, put into a JSON-RPC code and message here alone. What a
//! client sent (a name, a URI, a method) is echoed cut to [`ECHO`] characters, however long
//! it was.

use rmcp::model::{ErrorCode, ErrorData};
use serde_json::Value;

/// The most characters of a client's own text an answer echoes.
pub(super) const ECHO: usize = 200;

/// `text` cut to [`ECHO`] characters (with `…` where it was cut).
pub(super) fn cut(text: &str) -> String {
    match text.char_indices().nth(ECHO) {
        None => text.to_string(),
        Some((at, _)) => format!("{}…", &text[..at]),
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Fault {
    /// Not JSON (`-32700`).
    Parse(String),
    /// Not a request JSON-RPC knows (`-32600`).
    Request(String),
    /// A method the gateway does not serve (`-32601`); the method as sent.
    Method(String),
    /// A method's params of the wrong shape (`-32602`).
    Params(String),
    /// No such tool, prompt or resource here (`-32602` — `-32002` for a resource to a client
    /// older than `2026-07-28`, which rmcp maps).
    Unknown { what: &'static str, name: String },
    /// A call the gateway cannot make — an unknown tool, or one the caller's roles hide
    /// (`-32602`, its message as said: it names the tool and a hint).
    Call(String),
    /// A URI refused at the door (`-32602`).
    Uri { uri: String, why: String },
    /// The gateway is at a limit (`-32000`): try again later (an HTTP `429` says when).
    Busy(String),
    /// The upstream's own refusal, passed on as it gave it.
    Upstream(ErrorData),
    /// Something that should not happen (`-32603`).
    Internal(String),
}

impl Fault {
    /// The JSON-RPC error.
    pub(super) fn error(&self) -> ErrorData {
        let (code, message) = match self {
            Fault::Parse(why) => (ErrorCode::PARSE_ERROR, format!("parse error: {why}")),
            Fault::Request(why) => (
                ErrorCode::INVALID_REQUEST,
                format!("invalid request: {why}"),
            ),
            Fault::Method(m) => (
                ErrorCode::METHOD_NOT_FOUND,
                format!("no method `{}`", cut(m)),
            ),
            Fault::Params(why) => (ErrorCode::INVALID_PARAMS, format!("invalid params: {why}")),
            Fault::Unknown { what, name } if *what == "resource" => (
                ErrorCode::RESOURCE_NOT_FOUND,
                format!("no resource `{}` is served", cut(name)),
            ),
            Fault::Unknown { what, name } => (
                ErrorCode::INVALID_PARAMS,
                format!("no {what} `{}` is served", cut(name)),
            ),
            Fault::Call(why) => (ErrorCode::INVALID_PARAMS, why.clone()),
            Fault::Uri { uri, why } => (
                ErrorCode::INVALID_PARAMS,
                format!("resource `{}` is not taken: {why}", cut(uri)),
            ),
            Fault::Busy(why) => (ErrorCode(-32000), why.clone()),
            Fault::Upstream(e) => (e.code, cut(&e.message)),
            Fault::Internal(why) => (ErrorCode::INTERNAL_ERROR, why.clone()),
        };
        ErrorData::new(code, message, None)
    }

    /// The JSON-RPC error response to request `id` (`null` when it could not be read).
    pub(super) fn line(&self, id: &Value) -> Vec<u8> {
        let e = self.error();
        let v = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code.0, "message": e.message}});
        serde_json::to_vec(&v).unwrap_or_default()
    }
}

impl From<Fault> for ErrorData {
    fn from(f: Fault) -> ErrorData {
        f.error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_fault_has_its_code_and_a_clients_text_is_cut() {
        let long = "x".repeat(100_000);
        let e = Fault::Unknown {
            what: "prompt",
            name: long.clone(),
        }
        .error();
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(e.message.len() < 300, "{}", e.message.len());
        let codes = [
            (Fault::Parse("x".into()), -32700),
            (Fault::Request("x".into()), -32600),
            (Fault::Method(long.clone()), -32601),
            (Fault::Params("x".into()), -32602),
            (Fault::Call("x".into()), -32602),
            (
                Fault::Uri {
                    uri: long,
                    why: "x".into(),
                },
                -32602,
            ),
            (Fault::Internal("x".into()), -32603),
            (Fault::Busy("x".into()), -32000),
        ];
        for (f, code) in codes {
            let line: Value = serde_json::from_slice(&f.line(&Value::from(7))).expect("JSON");
            assert_eq!(line["error"]["code"], code, "{f:?}");
            assert_eq!(line["id"], 7);
            assert!(line["error"]["message"]
                .as_str()
                .is_some_and(|m| m.len() < 400));
        }
        assert_eq!(cut("héllo"), "héllo");
    }
}
