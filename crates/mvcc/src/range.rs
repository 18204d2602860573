//! The request-level shape of a Range answer, applied in etcd's order:
//!
//! 1. Fetch from the index in key order. With no sort order and no filter,
//!    fetch at most `limit + 1` key-values (one more than asked tells
//!    `more`); otherwise fetch them all. `count` is every key in the range
//!    at the revision, whatever the limit and filters. As in etcd, this
//!    looks at the requested order only: a sort target with no order and a
//!    limit sorts just the first `limit + 1` keys.
//! 2. Drop key-values outside the min/max mod and create revision filters
//!    (0 disables a filter).
//! 3. Sort. A target other than the key with no order sorts ascending;
//!    sorting by key ascending is the fetch order already.
//! 4. Cut to `limit`; `more` says whether anything was cut.
//! 5. `keys_only` drops values; `count_only` drops the key-values.
//!
//! An answer is bounded: its key-values are counted in encoded bytes as
//! they are loaded, and a range whose answer would pass the request's
//! bound (etcd's gRPC send limit, wire.rs) holds no more of them and is
//! refused with etcd's error once the rest are counted (see `Held`).
//!
//! As etcd 3.7 does, a keys-only range not sorted by value is answered
//! from the index: key, create and mod revisions and version, with no
//! value and no lease (the index does not hold leases). Only keys whose
//! generation the index cannot derive (see key_index.rs) are loaded.
//! Every other range loads its values in one pass over the stored blocks
//! (`records::load_sorted`).
//!
//! `count` is walked from the index unless it is known: at the newest
//! revision, from the counts the writes keep current (live_count.rs); at
//! an older one, from a nearby start's count (count_cache.rs). A
//! count-only range with a known count walks nothing. An `uncounted`
//! range (a RangeStream's window) counts nothing and answers 0.

use std::cmp::Ordering;

use crate::count_cache::{CountCache, COUNT_GAP_STEPS_MAX};
use crate::error::{Error, Result};
use crate::index::{RangeEnd, TreeIndex};
use crate::key_index::KeyIndex;
use crate::key_value::KeyValue;
use crate::request::{RangeRequest, RangeResponse, SortOrder, SortTarget};
use crate::revision::Revision;
use crate::wire;

/// Resolves the revision a request reads at, given the view's revision and
/// the compact revision.
pub fn read_revision(requested: i64, view: i64, compact: i64) -> Result<i64> {
    if requested <= 0 {
        return Ok(view);
    }
    if requested > view {
        return Err(Error::FutureRevision);
    }
    if requested < compact {
        return Err(Error::Compacted);
    }
    Ok(requested)
}

/// What a walk of the index fetched, by position in key order: the
/// key-values the index answered alone, in place (an empty one, which
/// allocates nothing, where a revision is to be loaded), and the
/// revisions to load with their positions. The key-values become the
/// answer's vector (see `Held`), so no key-value is copied between
/// vectors on its way to the answer.
#[derive(Default)]
struct Fetched {
    kvs: Vec<KeyValue>,
    ready: Vec<bool>,
    wanted: Vec<Revision>,
    positions: Vec<usize>,
}

/// Answers `request` from `index`, loading values with `load`, which
/// takes revisions in ascending key order and hands each one's key-value
/// to its second argument with the revision's position. With `counts`, a
/// limited range's `count` comes from the count of a nearby start (see
/// count_cache.rs) instead of a walk to the end of the range.
pub fn range(
    request: &RangeRequest,
    index: &TreeIndex,
    view: i64,
    compact: i64,
    counts: Option<&CountCache>,
    load: impl FnOnce(&[Revision], &mut dyn FnMut(usize, KeyValue)) -> Result<()>,
) -> Result<RangeResponse> {
    if request.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    let at = read_revision(request.revision, view, compact)?;
    let filtered = is_filtered(request);
    let sort_order = match (request.sort_order, request.sort_target) {
        (SortOrder::None, SortTarget::Key) => SortOrder::None,
        (SortOrder::None, _) => SortOrder::Ascend,
        (order, _) => order,
    };
    let fetch_limit = match request.limit {
        limit if limit > 0 && request.sort_order == SortOrder::None && !filtered => limit as usize + 1,
        _ => usize::MAX,
    };
    // As etcd 3.7: keys-only needs no value, so the index answers it.
    let from_index = request.keys_only && request.sort_target != SortTarget::Value;
    let end = RangeEnd::parse(&request.range_end);
    let paged = fetch_limit != usize::MAX && !request.count_only && end != RangeEnd::Single;
    let counting = Counting {
        cache: counts.filter(|_| paged),
        newest: at == view && end != RangeEnd::Single,
    };
    let known_count = counting.known(request, index, end, at);
    let mut response = RangeResponse {
        revision: view,
        kvs: Vec::new(),
        more: false,
        count: known_count.unwrap_or(0),
    };
    if request.count_only && known_count.is_some() {
        return Ok(response);
    }

    let (fetched, count) = visit(request, index, end, at, fetch_limit, from_index, known_count);
    counting.remember(request, index, end, at, count, known_count.is_none());
    response.count = count;
    if request.count_only {
        return Ok(response);
    }

    let sorted = sort_order != SortOrder::None;
    let mut kvs = resolve(request, fetched, (sorted, count), (from_index, filtered), load)?;
    match sort_order {
        SortOrder::None => {}
        SortOrder::Ascend => kvs.sort_by(|a, b| compare_by(request.sort_target, a, b)),
        SortOrder::Descend => kvs.sort_by(|a, b| compare_by(request.sort_target, b, a)),
    }
    if request.limit > 0 && kvs.len() > request.limit as usize {
        kvs.truncate(request.limit as usize);
        response.more = true;
    }
    if request.keys_only {
        for kv in &mut kvs {
            kv.value = Vec::new();
        }
    }
    response.kvs = kvs;
    Ok(response)
}

/// Walks the index: the first `fetch_limit` keys of the range, and the
/// count of all of them, or `known_count` (then the walk stops early).
fn visit(
    request: &RangeRequest,
    index: &TreeIndex,
    end: RangeEnd<'_>,
    at: i64,
    fetch_limit: usize,
    from_index: bool,
    known_count: Option<i64>,
) -> (Fetched, i64) {
    let mut fetched = Fetched::default();
    // A known count says how many keys the walk will fetch: the vectors
    // are made that size at once, not grown by copying (at 10M keys a
    // grown vector of key-values is copied and over-allocated by GBs).
    if let Some(known) = known_count.filter(|known| *known > 0) {
        fetched.reserve((known as usize).min(fetch_limit), from_index);
    }
    let mut count: i64 = 0;
    index.visit_histories(&request.key, end, at, |key, history, revision| {
        count += 1;
        if fetched.kvs.len() < fetch_limit && !request.count_only {
            fetched.push(from_index, key, history, revision);
        }
        known_count.is_none() || fetched.kvs.len() < fetch_limit
    });
    (fetched, known_count.unwrap_or(count))
}

/// Whether any of the min/max mod and create revision filters is set.
fn is_filtered(request: &RangeRequest) -> bool {
    request.min_mod_revision != 0
        || request.max_mod_revision != 0
        || request.min_create_revision != 0
        || request.max_create_revision != 0
}

/// Where a range's count may be known without walking to the end of the
/// range, and kept for the next one.
struct Counting<'a> {
    /// A limited range's: the count of a nearby start at the same
    /// revision (count_cache.rs).
    cache: Option<&'a CountCache>,
    /// The range reads at the newest revision, where a large range's
    /// count is kept current by the writes themselves (live_count.rs).
    newest: bool,
}

impl Counting<'_> {
    /// The count, when it is known (0 for an `uncounted` range).
    fn known(&self, request: &RangeRequest, index: &TreeIndex, end: RangeEnd<'_>, at: i64) -> Option<i64> {
        if request.uncounted {
            return Some(0);
        }
        let live = self.newest.then(|| index.live_count(&request.key, end)).flatten();
        live.or_else(|| {
            self.cache
                .and_then(|counts| count_from_cache(counts, index, request, at))
        })
    }

    /// Keeps `count` for later ranges; `walked` says the walk counted the
    /// whole range (no count was known).
    fn remember(
        &self,
        request: &RangeRequest,
        index: &TreeIndex,
        end: RangeEnd<'_>,
        at: i64,
        count: i64,
        walked: bool,
    ) {
        if request.uncounted {
            return;
        }
        if let Some(counts) = self.cache {
            counts.record(&request.key, &request.range_end, at, count);
        }
        if self.newest && walked {
            index.record_live_count(&request.key, end, count);
        }
    }
}

/// The count of `request`'s range at `at`, from the cached count of a
/// nearby start, if there is one close enough.
fn count_from_cache(counts: &CountCache, index: &TreeIndex, request: &RangeRequest, at: i64) -> Option<i64> {
    let (start, cached) = counts.lookup(&request.range_end, at)?;
    if start.as_slice() <= request.key.as_slice() {
        let between = index.count_between(&start, &request.key, at, COUNT_GAP_STEPS_MAX)?;
        Some(cached - between)
    } else {
        let between = index.count_between(&request.key, &start, at, COUNT_GAP_STEPS_MAX)?;
        Some(cached + between)
    }
}

impl Fetched {
    /// Room for `keys` more keys; for revisions to load only unless the
    /// index may answer them (`from_index`).
    fn reserve(&mut self, keys: usize, from_index: bool) {
        self.kvs.reserve_exact(keys);
        self.ready.reserve_exact(keys);
        if !from_index {
            self.wanted.reserve_exact(keys);
            self.positions.reserve_exact(keys);
        }
    }

    /// One key of the range: from the index alone when it knows the
    /// key's create revision and version (the key-value etcd 3.7 answers
    /// a keys-only range with: no value, no lease), else its revision to
    /// load.
    fn push(&mut self, from_index: bool, key: &[u8], history: &KeyIndex, revision: Revision) {
        let position = self.kvs.len();
        if from_index {
            if let Some((create_revision, version)) = history.generation_at(revision.main) {
                let kv = KeyValue {
                    key: key.to_vec(),
                    create_revision,
                    mod_revision: revision.main,
                    version,
                    value: Vec::new(),
                    lease: 0,
                };
                self.kvs.push(kv);
                self.ready.push(true);
                return;
            }
        }
        self.kvs.push(KeyValue::default());
        self.ready.push(false);
        self.wanted.push(revision);
        self.positions.push(position);
    }
}

/// The key-values `fetched` for a range of `count` keys, `sorted` or
/// not, held as [`Held`] holds them (the index's in place, the rest
/// loaded with `load`): in key order, or the refusal of an answer over
/// the bound.
fn resolve(
    request: &RangeRequest,
    fetched: Fetched,
    (sorted, count): (bool, i64),
    (from_index, filtered): (bool, bool),
    load: impl FnOnce(&[Revision], &mut dyn FnMut(usize, KeyValue)) -> Result<()>,
) -> Result<Vec<KeyValue>> {
    // Unsorted, a limit's last fetched key only tells `more` (the walk
    // fetched one past the limit); sorted (a sort target with no order
    // sorts too), any fetched key may be answered.
    let limited = request.limit > 0 && !filtered;
    let answered = match sorted || !limited {
        true => usize::MAX,
        false => request.limit as usize,
    };
    let Fetched {
        kvs,
        ready,
        wanted,
        positions,
    } = fetched;
    let mut held = Held::new(request, kvs, (answered, count), from_index, filtered);
    held.check_ready(&ready);
    drop(ready);
    load(&wanted, &mut |at, kv| held.hold(positions[at], kv))?;
    held.into_kvs()
}

/// The key-values a range holds while it builds its answer, in key
/// order, and the bytes their encoding comes to (wire.rs). Past the
/// request's bound it holds no more and only counts, so that the refusal
/// names the size the answer would have had.
///
/// What is counted is what is held, which is the answer itself for a
/// range without filters or a sort order, the one Kubernetes lists. A
/// filtered or sorted range holds every key-value that passes its
/// filters before its limit cuts them, and a keys-only range sorted by
/// value holds the values: such a range is refused when what it holds
/// passes the bound even if its answer would not, where etcd would build
/// it all (several GiB) and answer.
struct Held<'a> {
    request: &'a RangeRequest,
    /// The key-values held, by position; a slot not `filled` holds an
    /// empty one (no allocation), so that a range that holds every key
    /// it fetched answers with this vector itself, and one that filtered
    /// some drops them in place: the vector is the largest a range holds.
    /// Past the bound nothing more is put in it, and it is dropped with
    /// the refusal.
    slots: Vec<KeyValue>,
    filled: Vec<bool>,
    /// Positions from this one on were fetched only to tell `more`.
    answered: usize,
    /// The encoding of the answer but for its key-values: the largest
    /// header (the server adds it) and the `more` and `count` fields.
    rest_bytes: u64,
    from_index: bool,
    filtered: bool,
    /// The answer's key-values' bytes: at least their encoding's until
    /// `exact`, then exactly.
    bytes: u64,
    exact: bool,
    over: bool,
}

impl<'a> Held<'a> {
    /// Takes the walk's key-values (`slots`, none held yet) for a range
    /// of `count` keys answering positions below `answered`.
    fn new(
        request: &'a RangeRequest,
        slots: Vec<KeyValue>,
        (answered, count): (usize, i64),
        from_index: bool,
        filtered: bool,
    ) -> Held<'a> {
        let more = slots.len() > answered;
        Held {
            request,
            filled: vec![false; slots.len()],
            slots,
            answered,
            rest_bytes: wire::HEADER_BYTES_MAX + wire::answer_tail_len(more, count),
            from_index,
            filtered,
            bytes: 0,
            exact: false,
            over: false,
        }
    }

    /// Holds the key-values the walk answered from the index (`ready`
    /// by position, in place in the slots), checked as [`Held::hold`]
    /// checks a loaded one.
    fn check_ready(&mut self, ready: &[bool]) {
        for (position, _) in ready.iter().enumerate().filter(|(_, ready)| **ready) {
            let kv = std::mem::take(&mut self.slots[position]);
            self.hold(position, kv);
        }
    }

    /// Holds `kv` at `position` if it passes the filters and the answer
    /// is within the bound; counts it either way.
    fn hold(&mut self, position: usize, mut kv: KeyValue) {
        if self.from_index {
            kv.value = Vec::new();
            kv.lease = 0;
        }
        if self.filtered && !passes_filters(self.request, &kv) {
            return;
        }
        if position < self.answered && self.count(&kv) {
            self.over = true;
        }
        if !self.over {
            self.slots[position] = kv;
            self.filled[position] = true;
        }
    }

    /// Adds `kv` to the answer's size; whether the answer is now over
    /// the bound. Far from the bound it counts quickly, above the exact
    /// size; near it, exactly, from the key-values held.
    fn count(&mut self, kv: &KeyValue) -> bool {
        let max = self.request.answer_bytes_max.0;
        if !self.exact {
            self.bytes += wire::answer_entry_len_at_most(kv);
            if self.bytes + self.rest_bytes <= max {
                return false;
            }
            self.exact = true;
            let answered = self.answered.min(self.slots.len());
            self.bytes = self.slots[..answered]
                .iter()
                .zip(&self.filled)
                .filter(|(_, filled)| **filled)
                .map(|(kv, _)| wire::answer_entry_len(kv))
                .sum();
        }
        self.bytes += wire::answer_entry_len(kv);
        self.bytes + self.rest_bytes > max
    }

    /// The held key-values in key order, or the refusal of an answer over
    /// the bound.
    fn into_kvs(self) -> Result<Vec<KeyValue>> {
        if self.over {
            return Err(Error::AnswerTooLarge {
                bytes: self.bytes + self.rest_bytes,
                max: self.request.answer_bytes_max.0,
            });
        }
        let mut slots = self.slots;
        if self.filled.iter().all(|filled| *filled) {
            return Ok(slots);
        }
        let mut filled = self.filled.into_iter();
        slots.retain(|_| filled.next() == Some(true));
        Ok(slots)
    }
}

fn passes_filters(request: &RangeRequest, kv: &KeyValue) -> bool {
    (request.min_mod_revision == 0 || kv.mod_revision >= request.min_mod_revision)
        && (request.max_mod_revision == 0 || kv.mod_revision <= request.max_mod_revision)
        && (request.min_create_revision == 0 || kv.create_revision >= request.min_create_revision)
        && (request.max_create_revision == 0 || kv.create_revision <= request.max_create_revision)
}

/// Orders by the sort target. The sort is stable, so ties keep key order.
fn compare_by(target: SortTarget, a: &KeyValue, b: &KeyValue) -> Ordering {
    match target {
        SortTarget::Key => a.key.cmp(&b.key),
        SortTarget::Version => a.version.cmp(&b.version),
        SortTarget::Create => a.create_revision.cmp(&b.create_revision),
        SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
        SortTarget::Value => a.value.cmp(&b.value),
    }
}
