//! Qwen3's official tokenizer (scripts/fetch-models.sh) through arl's
//! tokenizer — its own reading of tokenizer.json, the piecewise encode with
//! its rewritten split pattern and caches, the byte-table decode — against the
//! reference implementations: the `tokenizers` crate's own pipeline
//! (`load_generic`, `encode_generic`, `decode_generic`) and Hugging Face's
//! Python `tokenizers` (tests/hf_reference.py), on a corpus generated here.
use arl_chat::tokenizer::Tokenizer;
use arl_core::rng::Rng;
use arl_testkit::common::{require_python, tmpdir};
use arl_testkit::real::real;
use serde_json::{json, Value};
use std::path::Path;

const ENGLISH: &[&str] = &[
    "The quick brown fox jumps over the lazy dog.",
    "It's",
    "they'll",
    "WE'VE",
    "don't",
    "I'm",
    "She'd",
    "you're",
    "O'Neill",
    "rock'n'roll",
    "Hello, world!",
    "e.g.",
    "U.S.A.",
    "state-of-the-art",
    "naïve café",
    "Zoë",
    "résumé",
    "Mr. Smith's 3rd-floor apartment",
    "  leading spaces",
    "trailing spaces   ",
    "ALL CAPS SENTENCE",
    "Question? Answer! (Parenthesis) [brackets] {braces} <angle>",
    "--double-dash",
    "...ellipsis…",
    "“curly quotes” and ‘single’",
    "hyphen‐minus – en — em",
];
const CHINESE: &[&str] = &[
    "中文分词测试",
    "我们今天去公园散步。",
    "人工智能正在改变世界，",
    "《红楼梦》是中国古典小说。",
    "你好！",
    "数学：１＋１＝２",
    "繁體中文與简体中文",
    "这是一个很长的句子，其中包含了许多不同的汉字和标点符号；",
];
const JAPANESE: &[&str] =
    &["こんにちは、世界！", "東京タワーは高い。", "カタカナとひらがな", "ｶﾀｶﾅ半角", "令和元年", "ガ", "か\u{3099}"];
const ARABIC: &[&str] = &["مرحبا بالعالم", "اللغة العربية جميلة", "٣٤٥ كتاب", "فِي الْبَيْتِ", "שלום עולם"];
const OTHER_SCRIPTS: &[&str] = &[
    "안녕하세요 세계",
    "\u{1100}\u{1161}\u{11a8}",
    "Привет, мир!",
    "Γειά σου Κόσμε",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "e\u{301}",
    "A\u{30a}",
    "\u{212b}",
    "\u{2126}",
    "ﬁ",
    "Ｆｕｌｌｗｉｄｔｈ",
    "ǅ",
    "ß",
    "İstanbul",
    "\u{200d}",
    "\u{feff}",
    "\u{0}",
    "\u{7}",
    "\u{1b}[31m",
    "\u{fffd}",
];
const CODE: &[&str] = &[
    "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
    "def f(x):\n\tif x > 0:\n\t\treturn x ** 2\n\treturn -x\n",
    "{\"name\": \"calc\", \"arguments\": {\"expr\": \"2+2\", \"n\": [1, 2.5, null, true]}}",
    "<div class=\"a\">&amp;&lt;</div>",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }\r\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "x = [i for i in range(10) if i % 2 == 0]",
    "$ ls -la | grep '^d' && echo \"done\"",
    "re.compile(r'\\s+(?!\\S)|\\p{L}+')",
    "a_b_c __init__ self.x_y",
    "    return a\n",
    "#include <stdio.h>",
    "let s = \"tab\\there\";",
    "// comment\n/* block */",
];
const NUMBERS: &[&str] = &[
    "3.14159",
    "1,234,567",
    "2024-06-01",
    "0x1F",
    "1e-9",
    "١٢٣",
    "½",
    "Ⅻ",
    "100%",
    "$42.00",
    "12:34:56",
    "007",
    "123456789012345678901234567890",
    "-17",
    "+3",
    "²",
    "①",
    "𝟘𝟙𝟚",
    "৩",
    "12+35=47",
    "x1y22z333",
];
const EMOJI: &[&str] = &["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "❤️", "🧑‍💻", "🤖🤖🤖", "☃", "🏳️‍🌈", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢"];
const SPACES: &[&str] = &[
    " ", "  ", "   ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ",
    " \t\n", "\u{a0}", "\u{3000}", "\u{2028}", "\u{85}", "\u{200b}", "\u{2009}", "\u{b}", "\u{c}",
];
const SPECIAL: &[&str] = &[
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<|im_",
    "im_end|>",
    "<|vision_start|>",
    "<|fim_prefix|>",
    "<think",
    "</ think>",
    "<|im_start|>assistant\n",
    "<|im_end|>\n",
    "<think>\n\n</think>\n\n",
    "<<|im_end|>>",
];
const CATEGORIES: &[&[&str]] =
    &[ENGLISH, CHINESE, JAPANESE, ARABIC, OTHER_SCRIPTS, CODE, NUMBERS, EMOJI, SPACES, SPECIAL];

/// A character from one of several ranges: scripts, symbols, marks, controls,
/// private use, anywhere (unassigned included), surrogates excepted.
fn random_char(rng: &mut Rng) -> char {
    const RANGES: &[(u32, u32)] = &[
        (0x20, 0x7e),
        (0x0, 0x1f),
        (0xa0, 0x24f),
        (0x300, 0x36f),
        (0x370, 0x52f),
        (0x590, 0x6ff),
        (0x900, 0x97f),
        (0xe00, 0xe7f),
        (0x1100, 0x11ff),
        (0x2000, 0x206f),
        (0x2100, 0x27ff),
        (0x3000, 0x30ff),
        (0x4e00, 0x9fff),
        (0xac00, 0xd7a3),
        (0xe000, 0xf8ff),
        (0xff00, 0xffef),
        (0x1f300, 0x1faff),
        (0x10000, 0x10ffff),
    ];
    loop {
        let (lo, hi) = *rng.choose(RANGES);
        if let Some(c) = char::from_u32(lo + rng.below((hi - lo + 1) as u64) as u32) {
            return c;
        }
    }
}

fn fragment(rng: &mut Rng) -> String {
    if rng.bool(0.08) {
        return (0..rng.range(1, 12)).map(|_| random_char(rng)).collect();
    }
    let category = *rng.choose(CATEGORIES);
    rng.choose(category).to_string()
}

/// `n` texts of 1–40 fragments, joined by nothing, a space or a line break,
/// and a few long documents.
fn corpus(seed: u64, n: usize) -> Vec<String> {
    let mut rng = Rng::new(seed);
    let mut texts: Vec<String> = CATEGORIES.iter().flat_map(|c| c.iter().map(|s| s.to_string())).collect();
    while texts.len() < n {
        let k = rng.range(1, 40);
        let mut t = String::new();
        for _ in 0..k {
            t.push_str(&fragment(&mut rng));
            match rng.below(6) {
                0 | 1 => t.push(' '),
                2 => t.push('\n'),
                _ => {}
            }
        }
        texts.push(t);
    }
    for d in 0..6 {
        let mut doc = String::new();
        while doc.len() < 30_000 + d * 10_000 {
            doc.push_str(&fragment(&mut rng));
            doc.push(if rng.bool(0.1) { '\n' } else { ' ' });
        }
        texts.push(doc);
    }
    texts
}

/// The Python `tokenizers` library's ids of `texts` and decode of those ids
/// and of `id_lists`.
fn python_reference(tokenizer_json: &Path, texts: &[String], id_lists: &[Vec<u32>]) -> Value {
    let t = tmpdir();
    let (inp, out) = (t.path().join("in.json"), t.path().join("out.json"));
    std::fs::write(&inp, json!({"texts": texts, "id_lists": id_lists}).to_string()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hf_reference.py");
    let st = std::process::Command::new(require_python())
        .args([script, "tokenize"])
        .arg(tokenizer_json)
        .args([&inp, &out])
        .status()
        .expect("running the Python reference");
    assert!(st.success(), "hf_reference.py tokenize failed");
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

#[test]
fn qwen3_tokenizer_equals_the_reference_on_a_generated_corpus() {
    let dir = real("qwen3-tokenizer");
    let tok = Tokenizer::load(&dir).unwrap();
    let generic = Tokenizer::load_generic(&dir).unwrap();
    // arl's reading of tokenizer.json builds the crate's tokenizer exactly.
    assert_eq!(tok.inner.to_string(false).unwrap(), generic.inner.to_string(false).unwrap());

    let texts = corpus(24, 3000);
    let chars: usize = texts.iter().map(|t| t.chars().count()).sum();
    let n = tok.inner.get_vocab_size(true) as u64;
    let mut rng = Rng::new(7);
    // Random ids (multi-byte characters cut, added tokens, ids past the vocabulary).
    let id_lists: Vec<Vec<u32>> =
        (0..400).map(|i| (0..1 + i % 60).map(|_| rng.below(n + 40) as u32).collect()).collect();
    let py = python_reference(&dir.join("tokenizer.json"), &texts, &id_lists);
    eprintln!("{} texts, {chars} characters; Python tokenizers {}", texts.len(), py["version"]);
    let py_ids: Vec<Vec<u32>> = serde_json::from_value(py["ids"].clone()).unwrap();
    let py_dec: Vec<String> = serde_json::from_value(py["decoded"].clone()).unwrap();

    let mut ids_of = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let ids = tok.encode(text).unwrap();
        assert_eq!(ids, generic.encode_generic(text).unwrap(), "the crate's encode of text {i}: {text:?}");
        assert_eq!(ids, py_ids[i], "Python's encode of text {i}: {text:?}");
        let dec = tok.decode(&ids);
        assert_eq!(dec, generic.decode_generic(&ids), "the crate's decode of text {i}");
        assert_eq!(dec, py_dec[i], "Python's decode of text {i}");
        ids_of.push(ids);
    }
    for (j, ids) in id_lists.iter().enumerate() {
        let dec = tok.decode(ids);
        assert_eq!(dec, generic.decode_generic(ids), "ids {ids:?}");
        assert_eq!(dec, py_dec[texts.len() + j], "ids {ids:?}");
    }
    // Again from the caches, on two threads at once (one of them then
    // encodes without the word cache, which the other holds).
    std::thread::scope(|s| {
        for half in 0..2 {
            let (tok, texts, ids_of) = (&tok, &texts, &ids_of);
            s.spawn(move || {
                for (i, text) in texts.iter().enumerate().filter(|(i, _)| i % 2 == half) {
                    assert_eq!(&tok.encode(text).unwrap(), &ids_of[i], "text {i} again: {text:?}");
                }
            });
        }
    });
    assert_eq!(
        tok.fast_paths(),
        arl_chat::tokenizer::FastPaths { piecewise: true, own_split: true, byte_table: true },
        "arl's own paths were taken"
    );
    // The special tokens in text are single ids; NFC applies outside them.
    let im_end = tok.token_to_id("<|im_end|>").unwrap();
    assert_eq!(tok.encode("a<|im_end|>b").unwrap()[1], im_end);
    assert_eq!(tok.encode("e\u{301}").unwrap(), tok.encode("é").unwrap());
}
