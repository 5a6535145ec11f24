//! Source records as the [`crate::ModelCache`] keeps them: each encoded into one allocation
//! of bytes and decoded only while its Service is rebuilt (see [`service`] and [`slice`]).

mod service;
mod slice;

pub(crate) use service::PackedService;
pub(crate) use slice::PackedSlice;

pub(crate) struct Writer(Vec<u8>);

impl Writer {
    pub fn with_capacity(n: usize) -> Writer {
        Writer(Vec::with_capacity(n))
    }

    pub fn finish(self) -> Box<[u8]> {
        self.0.into_boxed_slice()
    }

    pub fn byte(&mut self, b: u8) {
        self.0.push(b);
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }

    /// LEB128: lengths and counts are nearly always below 128, one byte.
    pub fn len(&mut self, mut n: usize) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.0.push(byte);
                return;
            }
            self.0.push(byte | 0x80);
        }
    }

    pub fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }

    pub fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.0.push(0),
            Some(s) => {
                self.0.push(1);
                self.str(s);
            }
        }
    }

    pub fn strs(&mut self, v: &[String]) {
        self.len(v.len());
        for s in v {
            self.str(s);
        }
    }

    pub fn int(&mut self, i: Option<i32>) {
        match i {
            None => self.0.push(0),
            Some(i) => {
                self.0.push(1);
                self.0.extend_from_slice(&i.to_le_bytes());
            }
        }
    }
}

/// Reads what [`Writer`] wrote; the bytes are always our own, so a short read is a bug.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let b = &self.bytes[self.at..self.at + n];
        self.at += n;
        b
    }

    pub fn byte(&mut self) -> u8 {
        let b = self.bytes[self.at];
        self.at += 1;
        b
    }

    pub fn len(&mut self) -> usize {
        let mut n = 0usize;
        let mut shift = 0;
        loop {
            let b = self.byte();
            n |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return n;
            }
            shift += 7;
        }
    }

    /// A string, borrowed from the bytes.
    pub fn str_ref(&mut self) -> &'a str {
        let n = self.len();
        std::str::from_utf8(self.take(n)).expect("written from a str")
    }

    pub fn string(&mut self) -> String {
        let n = self.len();
        let s = std::str::from_utf8(&self.bytes[self.at..self.at + n]).expect("written from a str");
        self.at += n;
        s.to_string()
    }

    pub fn opt_string(&mut self) -> Option<String> {
        (self.byte() == 1).then(|| self.string())
    }

    pub fn strings(&mut self) -> Vec<String> {
        (0..self.len()).map(|_| self.string()).collect()
    }

    pub fn int(&mut self) -> Option<i32> {
        (self.byte() == 1).then(|| {
            let v = i32::from_le_bytes(self.bytes[self.at..self.at + 4].try_into().expect("4 bytes"));
            self.at += 4;
            v
        })
    }
}
