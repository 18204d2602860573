//! Reading bbolt files, read-only: the database format of etcd's backend,
//! and so of the snapshots `etcdctl snapshot save` takes from etcd.
//!
//! The format (bbolt 1.3, as etcd 3.5 writes it; little-endian):
//!
//! ```text
//! page       id u64, flags u16, count u16, overflow u32, then its body;
//!            a page spans 1 + overflow pages of the meta's page size
//! flags      0x01 branch, 0x02 leaf, 0x04 meta, 0x10 freelist
//! meta       (pages 0 and 1; the valid one with the higher txid counts)
//!            magic u32 = 0xED0CDAED, version u32 = 2, page size u32,
//!            flags u32, root bucket {root u64, sequence u64},
//!            freelist u64, high-water page u64, txid u64, checksum u64
//!            (FNV-1a 64 of the bytes before it)
//! branch     count × {pos u32, key size u32, child page u64}
//! leaf       count × {flags u32, pos u32, key size u32, value size u32}
//!            (flags 0x01: the value is a bucket)
//!            an element's key is `pos` bytes past the element's own
//!            start, and a leaf value follows its key
//! bucket     {root page u64, sequence u64}; root 0: an inline bucket,
//!            whose one leaf page follows in the value itself
//! ```
//!
//! The root bucket's leaf entries are the top-level buckets. Pages are
//! read from the file as they are visited, so a file of any size is read
//! in the memory of one page at a time (plus the path to it).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::Error;

/// bbolt's magic number, in every meta page.
pub const BOLT_MAGIC: u32 = 0xED0C_DAED;
/// The format version etcd 3.5 writes.
const BOLT_VERSION: u32 = 2;
const PAGE_HEADER_BYTES: usize = 16;
const ELEMENT_BYTES: usize = 16;
const BRANCH_PAGE: u16 = 0x01;
const LEAF_PAGE: u16 = 0x02;
const BUCKET_LEAF: u32 = 0x01;
/// Deepest tree walked: a B+tree of 4 KiB pages holding a few billion
/// keys is under 10 deep; more means a loop in a damaged file.
const TREE_DEPTH_MAX: usize = 64;
/// Largest page span accepted (pages × size), against damaged headers.
const PAGE_SPAN_BYTES_MAX: u64 = 1 << 30;

pub struct BoltFile {
    file: File,
    path: PathBuf,
    page_size: u64,
    /// The root bucket's root page.
    root: u64,
}

fn le_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"))
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Whether `head` (a file's first bytes) is a bbolt file's.
pub fn is_bolt(head: &[u8]) -> bool {
    head.len() >= PAGE_HEADER_BYTES + 4 && le_u32(head, PAGE_HEADER_BYTES) == BOLT_MAGIC
}

/// Takes each (key, value) of a bucket.
pub type VisitPair<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), Error> + 'a;

/// Takes each leaf element as (flags, key, value).
type VisitElement<'a> = dyn FnMut(u32, &[u8], &[u8]) -> Result<(), Error> + 'a;

/// A page's elements, as (flags, key, value) for a leaf, or (0, key,
/// child page as 8 bytes) for a branch.
type Elements = Vec<(u32, Vec<u8>, Vec<u8>)>;

impl BoltFile {
    /// Opens `path` and finds its current meta page.
    pub fn open(path: &Path) -> Result<BoltFile, Error> {
        let file = File::open(path).map_err(Error::io(path))?;
        let mut bolt = BoltFile {
            file,
            path: path.to_path_buf(),
            page_size: 0,
            root: 0,
        };
        let mut first = vec![0u8; PAGE_HEADER_BYTES + 64];
        bolt.read_at(&mut first, 0)?;
        let page_size = u64::from(le_u32(&first, PAGE_HEADER_BYTES + 8));
        if !(512..=(1 << 16)).contains(&page_size) {
            return Err(bolt.corrupt("its page size is not a bbolt one"));
        }
        bolt.page_size = page_size;
        let mut best: Option<(u64, u64)> = None;
        for page in 0..2 {
            let mut meta = vec![0u8; PAGE_HEADER_BYTES + 64];
            bolt.read_at(&mut meta, page * page_size)?;
            let body = &meta[PAGE_HEADER_BYTES..];
            let valid = le_u32(body, 0) == BOLT_MAGIC
                && le_u32(body, 4) == BOLT_VERSION
                && fnv1a64(&body[..56]) == le_u64(body, 56);
            let txid = le_u64(body, 48);
            if valid && best.is_none_or(|(best_txid, _)| txid > best_txid) {
                best = Some((txid, le_u64(body, 16)));
            }
        }
        let (_, root) = best.ok_or_else(|| bolt.corrupt("neither meta page is valid"))?;
        bolt.root = root;
        Ok(bolt)
    }

    fn corrupt(&self, what: &str) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            what: format!("not a readable bbolt file: {what}"),
        }
    }

    fn read_at(&self, buffer: &mut [u8], offset: u64) -> Result<(), Error> {
        self.file.read_exact_at(buffer, offset).map_err(Error::io(&self.path))
    }

    /// Page `id`, all of its span.
    fn page(&self, id: u64) -> Result<Vec<u8>, Error> {
        let mut header = [0u8; PAGE_HEADER_BYTES];
        self.read_at(&mut header, id * self.page_size)?;
        let span = (1 + u64::from(le_u32(&header, 12))) * self.page_size;
        if span > PAGE_SPAN_BYTES_MAX {
            return Err(self.corrupt("a page spans too far"));
        }
        let mut page = vec![0u8; span as usize];
        self.read_at(&mut page, id * self.page_size)?;
        Ok(page)
    }

    /// A page's elements (see [`Elements`]).
    fn elements(&self, page: &[u8]) -> Result<(u16, Elements), Error> {
        let flags = le_u16(page, 8);
        let count = usize::from(le_u16(page, 10));
        let mut elements = Vec::with_capacity(count);
        for i in 0..count {
            let at = PAGE_HEADER_BYTES + i * ELEMENT_BYTES;
            let element = page
                .get(at..at + ELEMENT_BYTES)
                .ok_or_else(|| self.corrupt("an element past its page"))?;
            let slice = |from: usize, len: usize| {
                page.get(from..from + len)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| self.corrupt("a key or value past its page"))
            };
            match flags {
                BRANCH_PAGE => {
                    let key = slice(at + le_u32(element, 0) as usize, le_u32(element, 4) as usize)?;
                    elements.push((0, key, element[8..16].to_vec()));
                }
                LEAF_PAGE => {
                    let key_at = at + le_u32(element, 4) as usize;
                    let key_len = le_u32(element, 8) as usize;
                    let key = slice(key_at, key_len)?;
                    let value = slice(key_at + key_len, le_u32(element, 12) as usize)?;
                    elements.push((le_u32(element, 0), key, value));
                }
                _ => return Err(self.corrupt("a tree page is neither branch nor leaf")),
            }
        }
        Ok((flags, elements))
    }

    /// Visits every (key, value) of the top-level bucket `name` in key
    /// order; nested buckets are skipped. A bucket absent visits nothing.
    pub fn visit_bucket(&self, name: &[u8], visit: &mut VisitPair) -> Result<(), Error> {
        let mut header = None;
        self.walk(Tree::Page(self.root), 0, &mut |flags, key, value| {
            if flags & BUCKET_LEAF != 0 && key == name {
                header = Some(value.to_vec());
            }
            Ok(())
        })?;
        let Some(header) = header else { return Ok(()) };
        if header.len() < 16 {
            return Err(self.corrupt("a bucket header is short"));
        }
        let tree = match le_u64(&header, 0) {
            0 => Tree::Inline(header[16..].to_vec()),
            root => Tree::Page(root),
        };
        self.walk(tree, 0, &mut |flags, key, value| {
            if flags & BUCKET_LEAF == 0 {
                visit(key, value)?;
            }
            Ok(())
        })
    }

    /// Visits every leaf element under `tree`, in key order.
    fn walk(&self, tree: Tree, depth: usize, visit: &mut VisitElement) -> Result<(), Error> {
        if depth > TREE_DEPTH_MAX {
            return Err(self.corrupt("a tree deeper than any real one"));
        }
        let page = match tree {
            Tree::Page(id) => self.page(id)?,
            Tree::Inline(page) => page,
        };
        if page.len() < PAGE_HEADER_BYTES {
            return Err(self.corrupt("a page shorter than its header"));
        }
        let (flags, elements) = self.elements(&page)?;
        for (element_flags, key, value) in elements {
            if flags == BRANCH_PAGE {
                self.walk(Tree::Page(le_u64(&value, 0)), depth + 1, visit)?;
            } else {
                visit(element_flags, &key, &value)?;
            }
        }
        Ok(())
    }
}

/// Where a tree's root is.
enum Tree {
    Page(u64),
    /// An inline bucket's page, carried in its header's value.
    Inline(Vec<u8>),
}
