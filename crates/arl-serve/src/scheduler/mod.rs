//! Continuous batching: one thread owns the engine and loops over
//! "take commands → admit waiting requests (prefill) → one decode step for every
//! running sequence". New requests join between decode steps; each sequence
//! has its own KV cache; finished or aborted ones leave at once. Weight
//! updates wait for running requests (or abort them, `abort_all_requests`), as
//! SGLang's writer lock does.
//!
//! LoRA adapters ([`LoraTable`]) load and unload at once, between steps:
//! a request takes the version of its adapter that is loaded when the
//! scheduler receives it, and keeps it to its end, also when the adapter is
//! replaced or unloaded meanwhile (SGLang lets such requests finish too); an
//! old version leaves the engine when its last request ends.
//!
//! * `messages`: the channel types ([`Cmd`], [`Job`], [`Update`], …).
//! * `lora`: the adapter table of one scheduler ([`LoraTable`]).
//! * `shared`: the state the HTTP layer reads ([`Shared`]).
//! * `batch`: the batching loop itself ([`Scheduler`]).
//! * `dispatch`: the [`Dispatcher`] in front of several replicas (`--dp-size`).
mod batch;
mod dispatch;
mod lora;
mod messages;
mod shared;

pub use batch::Scheduler;
pub use dispatch::Dispatcher;
pub use lora::{not_loaded, AdapterInfo, LoraTable, LoraVersion};
pub use messages::{
    Cmd, Finish, InputLogprobs, Item, Job, LoraResult, Params, PauseMode, TokenOut, Update, UpdateResult,
};
pub use shared::Shared;
