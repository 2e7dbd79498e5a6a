//! The face: the command line's words (`cli`, clap), then what the commands do with them
//! (`app`: options resolved once, the engine opened, the runs driven, the gateway served).

pub(crate) mod app;
pub(crate) mod cli;
