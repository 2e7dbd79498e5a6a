//! The model: what a manifest (`tools.toml`), a batch and a model's reply say, read and
//! checked — `${env:…}` and `{arg}` templates, the providers' reply formats, `${id.path}`
//! references, the manifest, the batch and the lock of pinned definitions (`tools.lock`). No
//! I/O beyond reading their files.

pub(crate) mod batch;
pub(crate) mod lock;
pub(crate) mod manifest;
pub(crate) mod model_formats;
pub(crate) mod reference;
pub(crate) mod template;
