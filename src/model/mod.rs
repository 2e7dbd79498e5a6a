//! The model: what a manifest (`tools.toml`), a batch and a model's reply say, read and
//! checked — `${env:…}` and `{arg}` templates, the providers' reply formats, `${id.path}`
//! references, the manifest and the batch. No I/O beyond reading their files.

pub mod batch;
pub mod manifest;
pub mod model_formats;
pub mod reference;
pub(crate) mod template;
