//! ggml tensor types and their dequantization to float32, as ggml defines
//! the block formats (`ggml-common.h`): each block of 32 weights stores a
//! float16 scale `d` (and for the `_1` types a float16 minimum `m`) and its
//! quants; a weight is `d·q` (`Q8_0`, `Q4_0` with `q − 8`, `Q5_0` with
//! `q − 16`) or `d·q + m` (`Q4_1`, `Q5_1`). 4-bit quants are packed two to a
//! byte: the low nibbles are weights 0–15 of the block, the high nibbles
//! 16–31; `Q5_*` keep each weight's fifth bit in a 32-bit mask `qh`.
//! The arithmetic is float32 in the order written, as gguf-py (which
//! transformers uses) computes it, so both give the same bits.

/// The tensor types arl reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
}

const QK: usize = 32;

impl GgmlType {
    /// For error messages: the types [`GgmlType::from_code`] knows.
    pub const SUPPORTED: &'static str = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0";

    /// ggml's `enum ggml_type` code.
    pub fn from_code(code: u32) -> Option<GgmlType> {
        Some(match code {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            30 => GgmlType::BF16,
            _ => return None,
        })
    }

    pub fn code(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::BF16 => 30,
        }
    }

    /// Weights per block.
    pub fn block_len(self) -> u64 {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            _ => QK as u64,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 2 + 16,
            GgmlType::Q4_1 => 4 + 16,
            GgmlType::Q5_0 => 2 + 4 + 16,
            GgmlType::Q5_1 => 4 + 4 + 16,
            GgmlType::Q8_0 => 2 + 32,
        }
    }

    /// Bytes of `n` weights (`n` a multiple of [`GgmlType::block_len`]).
    pub fn bytes_for(self, n: u64) -> u64 {
        n / self.block_len() * self.block_bytes()
    }

    /// Dequantizes `raw` (a whole number of blocks) to float32.
    pub fn dequantize(self, raw: &[u8]) -> Vec<f32> {
        let bb = self.block_bytes() as usize;
        let n = raw.len() / bb * self.block_len() as usize;
        let mut out = Vec::with_capacity(n);
        match self {
            GgmlType::F32 => out.extend(raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            GgmlType::F16 => out.extend(raw.chunks_exact(2).map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))),
            GgmlType::BF16 => out.extend(raw.chunks_exact(2).map(|b| bf16_to_f32(u16::from_le_bytes([b[0], b[1]])))),
            GgmlType::Q8_0 => {
                for b in raw.chunks_exact(bb) {
                    let d = half(b, 0);
                    out.extend(b[2..].iter().map(|&q| d * f32::from(q as i8)));
                }
            }
            GgmlType::Q4_0 | GgmlType::Q4_1 => {
                let with_min = self == GgmlType::Q4_1;
                let qs_at = if with_min { 4 } else { 2 };
                for b in raw.chunks_exact(bb) {
                    let d = half(b, 0);
                    let m = if with_min { half(b, 2) } else { 0.0 };
                    let qs = &b[qs_at..qs_at + 16];
                    for shift in [0, 4] {
                        for &byte in qs {
                            let q = (byte >> shift) & 0x0F;
                            out.push(if with_min { d * f32::from(q) + m } else { d * f32::from(q as i8 - 8) });
                        }
                    }
                }
            }
            GgmlType::Q5_0 | GgmlType::Q5_1 => {
                let with_min = self == GgmlType::Q5_1;
                let qh_at = if with_min { 4 } else { 2 };
                for b in raw.chunks_exact(bb) {
                    let d = half(b, 0);
                    let m = if with_min { half(b, 2) } else { 0.0 };
                    let qh = u32::from_le_bytes([b[qh_at], b[qh_at + 1], b[qh_at + 2], b[qh_at + 3]]);
                    let qs = &b[qh_at + 4..qh_at + 20];
                    for (half_index, shift) in [(0usize, 0u32), (1, 4)] {
                        for (j, &byte) in qs.iter().enumerate() {
                            let high = ((qh >> (j + 16 * half_index)) & 1) as u8;
                            let q = ((byte >> shift) & 0x0F) | (high << 4);
                            out.push(if with_min { d * f32::from(q) + m } else { d * f32::from(q as i8 - 16) });
                        }
                    }
                }
            }
        }
        out
    }
}

fn half(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// IEEE 754 binary16 → binary32, exactly (subnormals, infinities and NaNs kept).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1F);
    let man = u32::from(h & 0x03FF);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: normalise the mantissa.
            let shift = man.leading_zeros() - 21;
            let man = (man << shift) & 0x03FF;
            sign | ((127 - 15 + 1 - shift) << 23) | (man << 13)
        }
        (0x1F, _) => sign | 0x7F80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// bfloat16 → float32 (the upper half of the float32 bits).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_covers_every_class() {
        assert_eq!(f16_to_f32(0x3C00), 1.0);
        assert_eq!(f16_to_f32(0xC000), -2.0);
        assert_eq!(f16_to_f32(0x7BFF), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24)); // smallest subnormal
        assert_eq!(f16_to_f32(0x03FF), 1023.0 * 2f32.powi(-24)); // largest subnormal
        assert_eq!(f16_to_f32(0x0400), 2f32.powi(-14)); // smallest normal
        assert_eq!(f16_to_f32(0x7C00), f32::INFINITY);
        assert!(f16_to_f32(0x7E00).is_nan());
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        // Every finite half survives a round trip through f32's arithmetic.
        for h in 0u16..0x7C00 {
            let f = f16_to_f32(h);
            assert!(f.is_finite() && f >= 0.0, "{h:#x}");
        }
        assert_eq!(bf16_to_f32(0x3F80), 1.0);
    }

    fn f16_bits(x: f32) -> [u8; 2] {
        // Exact for the small values used below.
        let bits = x.to_bits();
        let exp = ((bits >> 23) & 0xFF) as i32 - 127 + 15;
        let h = ((bits >> 16) & 0x8000) as u16 | ((exp as u16) << 10) | ((bits >> 13) & 0x03FF) as u16;
        h.to_le_bytes()
    }

    #[test]
    fn block_layouts() {
        // Q4_0: d = 0.5; nibble j low → weight j, high → weight j + 16.
        let mut b = f16_bits(0.5).to_vec();
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let w = GgmlType::Q4_0.dequantize(&b);
        assert_eq!(w.len(), 32);
        assert_eq!(w[0], (0.0 - 8.0) * 0.5);
        assert_eq!(w[15], (15.0 - 8.0) * 0.5);
        assert_eq!(w[16], (15.0 - 8.0) * 0.5);
        assert_eq!(w[31], (0.0 - 8.0) * 0.5);
        // Q4_1 adds the minimum.
        let mut b = f16_bits(0.25).to_vec();
        b.extend(f16_bits(-1.0));
        b.extend((0..16u8).map(|j| j | (j << 4)));
        let w = GgmlType::Q4_1.dequantize(&b);
        assert_eq!(w[3], 0.25 * 3.0 - 1.0);
        assert_eq!(w[19], 0.25 * 3.0 - 1.0);
        // Q8_0: signed bytes.
        let mut b = f16_bits(2.0).to_vec();
        b.extend((0..32).map(|j: i32| (j - 16) as i8 as u8));
        let w = GgmlType::Q8_0.dequantize(&b);
        assert_eq!(w[0], -32.0);
        assert_eq!(w[31], 30.0);
        // Q5_0: the fifth bit of weight j is bit j of qh (j < 16) or bit j of qh's upper half.
        let mut b = f16_bits(1.0).to_vec();
        b.extend(0x8000_0001u32.to_le_bytes()); // weights 0 and 31 get the high bit
        b.extend([0u8; 16]);
        let w = GgmlType::Q5_0.dequantize(&b);
        assert_eq!(w[0], 0.0); // 16 − 16
        assert_eq!(w[1], -16.0);
        assert_eq!(w[31], 0.0);
        assert_eq!(w[30], -16.0);
        assert_eq!(GgmlType::Q5_1.bytes_for(64), 48);
    }
}
