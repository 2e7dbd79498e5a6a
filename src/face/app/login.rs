//! `flux-tools mcp login NAME`, `mcp login --status` and `mcp logout NAME`: sign in to an
//! upstream server that wants OAuth, see who is signed in, forget a sign-in. The URL to open
//! is always printed (on stderr); a browser is opened too unless `--no-browser` — `$BROWSER`
//! when set (one program, given the URL as its one argument, never a shell), else `xdg-open`
//! (`open` on macOS). Nothing here prints a token.

use std::time::Duration;

use super::{load_manifest, runtime, stdout_write};
use crate::cli::Args;
use crate::error::{self, Error};
use crate::manifest::{Grant, Manifest, McpServer};
use crate::tools::mcp::oauth::{self, signin, store};

/// How long a sign-in waits for the browser to come back.
const SIGN_IN_WAIT: Duration = Duration::from_secs(300);

pub(super) fn login(args: &Args, name: &str, no_browser: bool) -> Result<u8, Error> {
    let manifest = load_manifest(args)?;
    let (decl, url) = server(&manifest, name)?;
    let rt = runtime()?;
    if decl
        .auth
        .as_ref()
        .is_some_and(|a| a.grant == Grant::Machine)
    {
        // No person signs in: fetch a token now, to show the credentials work.
        let tokens = oauth::Tokens::new(decl, &url).map_err(Error::Usage)?;
        rt.block_on(tokens.token()).map_err(Error::Usage)?;
        eprintln!("MCP server `{name}` uses client credentials: a token was fetched with them, and is kept and renewed by every run");
        return Ok(error::EXIT_OK);
    }
    let begun = rt
        .block_on(signin::begin(decl, &url))
        .map_err(Error::Usage)?;
    eprintln!("Sign in to `{name}` in a browser:\n\n    {}\n", begun.url);
    if !no_browser {
        if let Err(e) = open_browser(&begun.url) {
            eprintln!("(could not open a browser: {e}; open the URL above)");
        }
    }
    eprintln!(
        "Waiting for the browser to come back (up to {} minutes; Ctrl-C to give up)…",
        SIGN_IN_WAIT.as_secs() / 60
    );
    let path = begun.path().to_path_buf();
    let granted = rt
        .block_on(begun.finish(SIGN_IN_WAIT))
        .map_err(Error::Usage)?;
    let scopes = if granted.is_empty() {
        "none named".to_string()
    } else {
        granted.join(" ")
    };
    eprintln!(
        "Signed in to `{name}` (scopes: {scopes}); the tokens are kept in {}",
        path.display()
    );
    Ok(error::EXIT_OK)
}

pub(super) fn logout(args: &Args, name: &str) -> Result<u8, Error> {
    let manifest = load_manifest(args)?;
    let (decl, url) = server(&manifest, name)?;
    let path = store::path_of(decl, &url).map_err(Error::Usage)?;
    match store::remove(&path).map_err(Error::Usage)? {
        true => eprintln!(
            "Signed out of `{name}`: its tokens ({}) are deleted",
            path.display()
        ),
        false => eprintln!("`{name}` was not signed in"),
    }
    Ok(error::EXIT_OK)
}

/// A line per server with `auth`: its grant, whether a token is kept, until when, its scopes.
pub(super) fn status(args: &Args, only: Option<&str>) -> Result<u8, Error> {
    let manifest = load_manifest(args)?;
    if let Some(name) = only {
        server(&manifest, name)?;
    }
    let mut out = String::new();
    for decl in manifest.mcp_servers.values() {
        if decl.auth.is_none() || only.is_some_and(|o| o != decl.name) {
            continue;
        }
        let (_, url) = server(&manifest, &decl.name)?;
        out.push_str(&format!("{}\t{}\n", decl.name, state(decl, &url)));
    }
    if out.is_empty() {
        out.push_str("no server in the manifest has `auth`\n");
    }
    stdout_write(out.as_bytes())?;
    Ok(error::EXIT_OK)
}

/// What is kept of `decl`'s sign-in, in words.
fn state(decl: &McpServer, url: &str) -> String {
    let machine = decl
        .auth
        .as_ref()
        .is_some_and(|a| a.grant == Grant::Machine);
    let path = match store::path_of(decl, url) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let kept = match store::load(&path) {
        Ok(Some(k)) => k,
        Ok(None) if machine => {
            return "client credentials: no token fetched yet (the first call fetches one)".into()
        }
        Ok(None) => return format!("not signed in: run `flux-tools mcp login {}`", decl.name),
        Err(e) => return e,
    };
    let c = &kept.credentials;
    let response = c.token_response.as_ref();
    let expiry = match (
        response.and_then(oauth2::TokenResponse::expires_in),
        c.token_received_at,
    ) {
        (Some(life), Some(at)) => {
            let left = (at + life.as_secs()).saturating_sub(oauth::now());
            if left == 0 {
                "expired".to_string()
            } else {
                format!("expires in {}s", left)
            }
        }
        _ => "no expiry given".to_string(),
    };
    let refresh = response
        .and_then(oauth2::TokenResponse::refresh_token)
        .is_some();
    let how = if machine {
        "client credentials"
    } else {
        "signed in"
    };
    let renew = if machine {
        "renewed with the client's credentials"
    } else if refresh {
        "refreshable"
    } else {
        "no refresh token"
    };
    let scopes = if c.granted_scopes.is_empty() {
        "-".to_string()
    } else {
        c.granted_scopes.join(" ")
    };
    let wanted = if kept.wanted_scopes.is_empty() {
        String::new()
    } else {
        format!(
            "; the next sign-in also asks for: {}",
            kept.wanted_scopes.join(" ")
        )
    };
    format!("{how}; {expiry}, {renew}; scopes: {scopes}{wanted}")
}

/// Server `name` of the manifest, which must have `auth` and a `url`, and its URL rendered.
fn server<'m>(manifest: &'m Manifest, name: &str) -> Result<(&'m McpServer, String), Error> {
    let Some(decl) = manifest.mcp_servers.get(name) else {
        let declared: Vec<&str> = manifest.mcp_servers.keys().map(String::as_str).collect();
        let hint = error::suggest(name, declared.iter().copied())
            .unwrap_or_else(|| format!("declared servers: {}", declared.join(", ")));
        return Err(Error::Usage(format!(
            "{} has no [mcp_servers.{name}]\nhint: {hint}",
            manifest.name()
        )));
    };
    let (Some(_), Some(url)) = (&decl.auth, &decl.url) else {
        return Err(Error::Usage(format!(
            "[mcp_servers.{name}] has no `auth`: there is nothing to sign in to\nhint: add `auth = \"oauth\"` to a server reached by `url`"
        )));
    };
    let url = url
        .render(&serde_json::Map::new(), &|s| s.to_string())
        .map_err(|e| Error::Usage(format!("MCP server `{name}`: {e}")))?;
    Ok((decl, url))
}

/// Open `url` in the person's browser, without a shell.
fn open_browser(url: &str) -> std::io::Result<()> {
    let program = match std::env::var_os("BROWSER").filter(|b| !b.is_empty()) {
        Some(b) => b,
        None if cfg!(target_os = "macos") => "open".into(),
        None => "xdg-open".into(),
    };
    std::process::Command::new(program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(drop)
}
