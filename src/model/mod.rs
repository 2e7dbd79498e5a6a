//! The model: what a manifest (`tools.toml`), a batch and a model's reply say, read and
//! checked — `${env:…}` and `{arg}` templates, the providers' reply formats, `${id.path}`
//! references, the manifest and the batch. No I/O beyond reading their files.

pub(crate) mod batch;
pub(crate) mod manifest;
pub(crate) mod model_formats;
pub(crate) mod reference;
pub(crate) mod template;
