//! Decoding by table: each id's bytes, built from the vocabulary for the
//! decoders that join per-token bytes (`Fuse`, `ByteLevel`), and GPT-2's
//! byte-level alphabet.

/// Each id's bytes, one after another: id `i`'s are
/// `bytes[spans[i].0..][..spans[i].1]`; an id without a token has none.
pub(super) struct ByteTable {
    bytes: Vec<u8>,
    pub(super) spans: Vec<(u32, u32)>,
}

/// How a decoder turns a token's text into bytes, where it does so token by
/// token: `Fuse` as is, `ByteLevel` each character back to its byte by GPT-2's
/// table (a token with a character outside it keeps its UTF-8 bytes).
#[derive(Clone, Copy)]
pub(super) struct TokenBytes {
    byte_level: bool,
    /// GPT-2's alphabet is U+0000–U+0143: a character's byte by its code point.
    char_byte: [Option<u8>; 0x144],
}

impl TokenBytes {
    pub(super) fn of(decoder: Option<&tokenizers::DecoderWrapper>) -> Option<TokenBytes> {
        use tokenizers::DecoderWrapper;
        let byte_level = match decoder? {
            DecoderWrapper::Fuse(_) => false,
            DecoderWrapper::ByteLevel(_) => true,
            _ => return None,
        };
        let mut char_byte = [None; 0x144];
        for (b, c) in byte_level_chars().into_iter().enumerate() {
            char_byte[c as usize] = Some(b as u8);
        }
        Some(TokenBytes { byte_level, char_byte })
    }

    /// Appends `token`'s bytes to `out`.
    fn push(&self, token: &str, out: &mut Vec<u8>) {
        let start = out.len();
        if self.byte_level
            && token.chars().all(|c| self.char_byte.get(c as usize).copied().flatten().map(|b| out.push(b)).is_some())
        {
            return;
        }
        out.truncate(start);
        out.extend_from_slice(token.as_bytes());
    }
}

impl ByteTable {
    /// From `(token, id)` pairs; a later pair for the same id wins.
    pub(super) fn new<'a>(n: usize, tokens: impl Iterator<Item = (&'a str, u32)>, how: &TokenBytes) -> ByteTable {
        let mut t = ByteTable { bytes: Vec::new(), spans: vec![(0, 0); n] };
        for (token, id) in tokens {
            t.set(id, token, how);
        }
        t
    }

    pub(super) fn set(&mut self, id: u32, token: &str, how: &TokenBytes) {
        let id = id as usize;
        if id >= self.spans.len() {
            self.spans.resize(id + 1, (0, 0));
        }
        let start = self.bytes.len();
        how.push(token, &mut self.bytes);
        self.spans[id] = (start as u32, (self.bytes.len() - start) as u32);
    }

    /// For the decoders whose output is the concatenation of per-token bytes
    /// ([`TokenBytes`]), then lossy UTF-8 over the whole, each id's bytes.
    /// Decoding is then a table lookup per id, not a string per token through
    /// the generic chain (a tenth of `arl-rollout`'s CPU, `scripts/bench/rollout.sh`).
    pub(super) fn of_tokenizer(inner: &tokenizers::Tokenizer) -> Option<ByteTable> {
        let how = TokenBytes::of(inner.get_decoder())?;
        let n = inner.get_vocab_size(true);
        let mut table = ByteTable { bytes: Vec::new(), spans: vec![(0, 0); n] };
        for id in 0..n as u32 {
            if let Some(t) = inner.id_to_token(id) {
                table.set(id, &t, &how);
            }
        }
        Some(table)
    }

    /// `ids` decoded: their bytes one after another, as lossy UTF-8.
    pub(super) fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            // Unknown ids are skipped, as the generic decode does.
            if let Some(&(start, len)) = self.spans.get(id as usize) {
                bytes.extend_from_slice(&self.bytes[start as usize..][..len as usize]);
            }
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

/// GPT-2's byte-level alphabet: the character standing for each byte
/// (printable Latin-1 bytes stand for themselves, the others for 256 + n in
/// byte order).
pub fn byte_level_chars() -> Vec<char> {
    let keeps = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut next = 256;
    (0..256u32)
        .map(|b| {
            let c = if keeps(b) {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(c).expect("a valid char")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::tests::load_json;
    use crate::tokenizer::Tokenizer;
    use std::path::Path;

    fn check_against_generic(tok: &Tokenizer, seed: u64) {
        let n = tok.inner.get_vocab_size(true) as u64;
        let mut rng = arl_core::rng::Rng::new(seed);
        for len in [0, 1, 2, 3, 7, 40, 200] {
            for _ in 0..50 {
                // Some ids past the vocabulary: skipped by both.
                let ids: Vec<u32> = (0..len).map(|_| (rng.next_u64() % (n + 3)) as u32).collect();
                assert_eq!(tok.decode(&ids), tok.decode_generic(&ids), "ids {ids:?}");
            }
        }
    }

    #[test]
    fn fast_decode_equals_the_generic_one_for_fuse() {
        let tok =
            Tokenizer::load(&Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("testdata/tiny-model"))
                .unwrap();
        assert!(matches!(tok.inner.get_decoder(), Some(tokenizers::DecoderWrapper::Fuse(_))));
        check_against_generic(&tok, 1);
        assert!(tok.fast_decode.get().unwrap().is_some(), "the fast path was taken");
    }

    #[test]
    fn fast_decode_equals_the_generic_one_for_byte_level() {
        // A byte-level BPE vocabulary (every byte's character), merged tokens,
        // a token with a character outside the byte alphabet, added tokens.
        let chars = byte_level_chars();
        let json = crate::tokenizer_build::byte_level_bpe_json(
            &["ĠĠ", "Ãł", "中", "a中"],
            &[(260, "<|im_end|>", true), (261, "<tool_call>", false)],
        );
        let (_d, tok) = load_json(&json);
        check_against_generic(&tok, 2);
        // Split multi-byte characters become U+FFFD in both.
        let e9 = [chars[0xe4] as u32, chars[0xb8] as u32];
        let ids: Vec<u32> =
            e9.iter().map(|c| tok.token_to_id(&char::from_u32(*c).unwrap().to_string()).unwrap()).collect();
        assert_eq!(tok.decode(&ids), tok.decode_generic(&ids));
        assert!(tok.fast_decode.get().unwrap().is_some(), "the fast path was taken");
    }
}
