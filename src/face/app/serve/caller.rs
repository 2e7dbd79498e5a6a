//! Who makes a request: the tenant it spends for, the subject it names (a JWT's `sub`; a
//! static token's tenant), its roles, and how it proved it. Made once per HTTP request by the
//! front door (`http.rs`) and carried with every call into the lanes, spans, history,
//! approvals, the status page and the audit trail. What a caller sees is decided here, from
//! the manifest's `[roles]`, the same way for lists and calls.

use std::sync::Arc;

use crate::manifest::{Manifest, Op, Subject};

/// How a caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// stdio, or HTTP with neither `[serve.tokens]` nor `[serve.auth]`: whoever started or
    /// reaches the gateway.
    Local,
    /// A static token of `[serve.tokens]`.
    Token,
    /// A JWT access token of `[serve.auth]`.
    Jwt,
}

impl Via {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Via::Local => "local",
            Via::Token => "token",
            Via::Jwt => "jwt",
        }
    }
}

/// One request's caller.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub tenant: String,
    /// Who it is (`None`: a local caller, known only by its tenant).
    pub subject: Option<String>,
    /// Its roles; `None`: roles do not bound it (a local caller).
    pub roles: Option<Arc<[String]>>,
    pub via: Via,
    /// A JWT caller's token, for upstreams that carry the caller's identity (never printed).
    pub behalf: Option<Arc<crate::tools::Behalf>>,
}

impl Caller {
    /// A caller of the gateway's own tenant, bound by no role.
    pub(crate) fn local(tenant: String) -> Caller {
        Caller {
            tenant,
            subject: None,
            roles: None,
            via: Via::Local,
            behalf: None,
        }
    }

    /// Who it is, for messages and the status page: its subject, else its tenant.
    pub(crate) fn who(&self) -> &str {
        self.subject.as_deref().unwrap_or(&self.tenant)
    }

    /// Who owns the sessions it opens: its tenant, and its subject when it has one (so a
    /// session is not reached by another person of the same tenant).
    pub(crate) fn owner(&self) -> String {
        match &self.subject {
            Some(s) if self.via == Via::Jwt => format!("{}/{s}", self.tenant),
            _ => self.tenant.clone(),
        }
    }

    /// Whether it may see (list, call, read, get) `name` — a tool's or prompt's served name,
    /// a resource's served URI. Without `[roles]`, every caller sees everything.
    pub(crate) fn sees(&self, manifest: &Manifest, what: Subject, name: &str) -> bool {
        match &self.roles {
            None => true,
            Some(held) => !manifest.roles.declared() || manifest.roles.allows(held, what, name),
        }
    }

    /// Whether its roles let it use `op` of the operations face.
    pub(crate) fn may(&self, manifest: &Manifest, op: Op) -> bool {
        self.roles
            .as_ref()
            .is_some_and(|held| manifest.roles.may(held, op))
    }

    /// The most live sessions it may keep, when one of its roles bounds them.
    pub(crate) fn session_limit(&self, manifest: &Manifest) -> Option<u32> {
        let held = self.roles.as_ref()?;
        manifest.roles.sessions(held)
    }

    /// Its roles, for the audit trail.
    pub(crate) fn role_names(&self) -> Vec<String> {
        self.roles
            .as_deref()
            .map(<[String]>::to_vec)
            .unwrap_or_default()
    }
}
