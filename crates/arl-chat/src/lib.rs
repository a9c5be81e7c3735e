//! A model's text side: its tokenizer (`tokenizer`), its chat template
//! rendered as transformers renders it (`template`), and arl's test
//! tokenizers (`tokenizer_build`) and the tool calls in a model's text
//! (`toolcall`).
pub mod template;
pub mod tokenizer;
pub mod tokenizer_build;
pub mod toolcall;
