//! Page headers read from their bytes: a reader of the Thrift compact
//! protocol ([`Thrift`]), enough to walk a `PageHeader`, and what a header
//! says ([`PageHead`]).

/// What a page header says (Thrift compact protocol, `PageHeader`).
#[derive(Debug, PartialEq)]
pub(super) struct PageHead {
    pub header_len: usize,
    /// `PageType`: 0 data page, 2 dictionary page, 3 data page v2.
    pub kind: i32,
    pub uncompressed: usize,
    pub compressed: usize,
    pub num_values: u64,
}

/// A reader of the Thrift compact protocol, enough to walk a page header.
pub(super) struct Thrift<'a> {
    pub(super) b: &'a [u8],
    pub(super) p: usize,
}

impl Thrift<'_> {
    pub(super) fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.p)?;
        self.p += 1;
        Some(v)
    }

    fn advance(&mut self, n: usize) -> Option<()> {
        self.p = self.p.checked_add(n).filter(|&e| e <= self.b.len())?;
        Some(())
    }

    pub(super) fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn i32(&mut self) -> Option<i32> {
        let v = u32::try_from(self.varint()?).ok()?;
        Some(((v >> 1) as i32) ^ -((v & 1) as i32))
    }

    /// The next field's (id, type), `None` at the struct's end.
    fn field(&mut self, last: &mut i16) -> Option<Option<(i16, u8)>> {
        let h = self.byte()?;
        if h == 0 {
            return Some(None);
        }
        let (delta, ty) = (h >> 4, h & 0x0f);
        let id = if delta == 0 {
            let v = u16::try_from(self.varint()?).ok()?;
            ((v >> 1) as i16) ^ -((v & 1) as i16)
        } else {
            last.checked_add(i16::from(delta))?
        };
        *last = id;
        Some(Some((id, ty)))
    }

    /// Skips a value of type `ty`; `in_collection`: a boolean takes a byte.
    fn skip(&mut self, ty: u8, in_collection: bool, depth: u32) -> Option<()> {
        if depth > 16 {
            return None;
        }
        match ty {
            1 | 2 if in_collection => self.advance(1),
            1 | 2 => Some(()),
            3 => self.advance(1),
            4..=6 => self.varint().map(drop),
            7 => self.advance(8),
            8 => {
                let n = usize::try_from(self.varint()?).ok()?;
                self.advance(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let n = match h >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                // Every element takes at least a byte: `n` is bounded by the input.
                for _ in 0..n {
                    self.skip(h & 0x0f, true, depth + 1)?;
                }
                Some(())
            }
            11 => {
                let n = self.varint()?;
                if n > 0 {
                    let kv = self.byte()?;
                    for _ in 0..n {
                        self.skip(kv >> 4, true, depth + 1)?;
                        self.skip(kv & 0x0f, true, depth + 1)?;
                    }
                }
                Some(())
            }
            12 => self.skip_struct(depth + 1),
            _ => None,
        }
    }

    fn skip_struct(&mut self, depth: u32) -> Option<()> {
        let mut last = 0;
        while let Some((_, ty)) = self.field(&mut last)? {
            self.skip(ty, false, depth)?;
        }
        Some(())
    }

    /// The `num_values` (field 1, i32) of a nested page header struct.
    fn num_values(&mut self) -> Option<u64> {
        let (mut last, mut n) = (0, None);
        while let Some((id, ty)) = self.field(&mut last)? {
            match (id, ty) {
                (1, 5) => n = Some(u64::try_from(self.i32()?).ok()?),
                _ => self.skip(ty, false, 1)?,
            }
        }
        n
    }
}

/// Parses the page header at the start of `buf`; `None` if it is not one.
pub(super) fn page_head(buf: &[u8]) -> Option<PageHead> {
    let mut t = Thrift { b: buf, p: 0 };
    let (mut last, mut kind, mut unc, mut comp, mut nv) = (0, None, None, None, None);
    while let Some((id, ty)) = t.field(&mut last)? {
        match (id, ty) {
            (1, 5) => kind = Some(t.i32()?),
            (2, 5) => unc = Some(usize::try_from(t.i32()?).ok()?),
            (3, 5) => comp = Some(usize::try_from(t.i32()?).ok()?),
            (5 | 7 | 8, 12) => nv = Some(t.num_values()?),
            _ => t.skip(ty, false, 0)?,
        }
    }
    Some(PageHead { header_len: t.p, kind: kind?, uncompressed: unc?, compressed: comp?, num_values: nv? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_headers_are_read_and_garbage_is_not_one() {
        // type 0, uncompressed 100, compressed 60, data_page_header (field 5) {
        // num_values 7, encoding 0, def 3, rep 3, statistics { null_count 0 } }.
        let h = [
            0x15, 0x00, 0x15, 0xc8, 0x01, 0x15, 0x78, 0x2c, 0x15, 0x0e, 0x15, 0x00, 0x15, 0x06, 0x15, 0x06, 0x1c, 0x36,
            0x00, 0x00, 0x00, 0x00,
        ];
        let p = page_head(&h).expect("a header");
        assert_eq!(p, PageHead { header_len: h.len(), kind: 0, uncompressed: 100, compressed: 60, num_values: 7 });
        assert_eq!(page_head(&h[..10]), None, "cut short");
        assert_eq!(page_head(&[0xff; 40]), None);
        assert_eq!(page_head(&[0x19, 0xfc, 0xff, 0xff, 0xff, 0x0f]), None, "a list longer than the input");
    }
}
