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

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::index::{RangeEnd, TreeIndex};
use crate::key_value::KeyValue;
use crate::request::{RangeRequest, RangeResponse, SortOrder, SortTarget};
use crate::revision::Revision;

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

/// Answers `request` from `index`, loading values with `load`.
pub fn range(
    request: &RangeRequest,
    index: &TreeIndex,
    view: i64,
    compact: i64,
    mut load: impl FnMut(Revision) -> Result<KeyValue>,
) -> Result<RangeResponse> {
    if request.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    let at = read_revision(request.revision, view, compact)?;
    let filtered = request.min_mod_revision != 0
        || request.max_mod_revision != 0
        || request.min_create_revision != 0
        || request.max_create_revision != 0;
    let sort_order = match (request.sort_order, request.sort_target) {
        (SortOrder::None, SortTarget::Key) => SortOrder::None,
        (SortOrder::None, _) => SortOrder::Ascend,
        (order, _) => order,
    };
    let fetch_limit = match request.limit {
        limit if limit > 0 && request.sort_order == SortOrder::None && !filtered => limit as usize + 1,
        _ => usize::MAX,
    };

    let mut revisions = Vec::new();
    let mut count: i64 = 0;
    index.visit(&request.key, RangeEnd::parse(&request.range_end), at, |_, revision| {
        count += 1;
        if revisions.len() < fetch_limit && !request.count_only {
            revisions.push(revision);
        }
        true
    });
    let mut response = RangeResponse {
        revision: view,
        kvs: Vec::new(),
        more: false,
        count,
    };
    if request.count_only {
        return Ok(response);
    }

    let mut kvs = Vec::with_capacity(revisions.len());
    for revision in revisions {
        kvs.push(load(revision)?);
    }
    if filtered {
        kvs.retain(|kv| passes_filters(request, kv));
    }
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
