//! GGUF, llama.cpp's model format, read and converted to a Hugging Face
//! model directory (`arl-train convert`): the container ([`reader`]), the
//! tensor types and their dequantization ([`quant`]), the vocabulary as
//! tokenizer files ([`vocab`]) and the whole directory ([`convert`]).
//! No libtorch: float32 safetensors are written directly.
pub mod convert;
pub mod quant;
pub mod reader;
pub mod vocab;

pub use convert::{convert, Summary};
pub use reader::Gguf;
