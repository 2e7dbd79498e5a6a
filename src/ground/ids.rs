//! Ids — of calls, of tenants — checked in one place: they are untrusted and end up in file
//! names, environment variables, lane names and references.

/// The longest id (of a call, a tenant) there may be.
pub(crate) const MAX_ID_LEN: usize = 128;

/// Seed the calling thread's `fastrand` generator from the operating system's randomness.
/// `fastrand` seeds each thread from the monotonic clock and the thread's number — the same in
/// two processes that start together, which then made the same run ids (and idempotency keys,
/// trace ids, lock tokens). Called by `main` and by every thread of the runtime as it starts.
pub(crate) fn reseed_thread() {
    use std::hash::BuildHasher;
    let os = std::collections::hash_map::RandomState::new();
    fastrand::seed(os.hash_one((std::process::id(), std::thread::current().id())));
}

/// Ids — of calls, of tenants — are untrusted and end up in file names, environment variables
/// and references: letters, digits, `_`, `-` and `:` only. `noun` says whose id it is in the
/// error ("call id", "tenant").
pub(crate) fn check_id(noun: &str, id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err(format!("a {noun} cannot be empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(format!(
            "{noun} is {} characters long; the limit is {MAX_ID_LEN}",
            id.len()
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':')))
    {
        return Err(format!(
            "{noun} `{}` contains `{}`; ids may use letters, digits, `_`, `-` and `:`",
            id.escape_default(),
            c.escape_default()
        ));
    }
    Ok(())
}
