//! A model's text side: its tokenizer (`tokenizer`), its chat template
//! rendered as transformers renders it (`template`), arl's test
//! tokenizers (`tokenizer_build`), the tool calls in a model's text in the
//! formats model families write them (`toolcall`), the tool header for
//! templates without a tool section (`tool_header`), and a record's tool
//! schemas (`tools`).
pub mod template;
pub mod tokenizer;
pub mod tokenizer_build;
pub mod tool_header;
pub mod toolcall;
pub mod tools;
