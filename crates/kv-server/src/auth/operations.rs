//! Who a request is from and whether they may make it, and the changes
//! and reads of etcd's `Auth` service, over the member's auth state (see
//! `crate::auth` for the state, tokens and revisions).
//!
//! A request's caller is, as in etcd: the user of its `token` metadata
//! (an unknown or expired token is "invalid auth token"); else, with
//! `--client-cert-auth`, the common name of the client certificate its
//! connection showed; else nobody, whose requests get "user name is
//! empty" wherever a permission is needed.

use std::collections::BTreeSet;
use std::time::Duration;

use tonic::metadata::MetadataMap;

use crate::auth::perms::Access;
use crate::auth::state::AuthState;
use crate::auth::tokens::token_index;
use crate::auth::Caller;
use crate::connection_info::ConnectionInfo;
use crate::error::RequestError;
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::kvserverpb::{auth_request, raft_request, AuthRequest, AuthenticateRecord};

/// How long a token made at a raft index this member has not applied yet
/// may wait for it: a login through another member reaches this one
/// within a heartbeat or two; past this the token is refused as invalid.
const TOKEN_INDEX_WAIT: Duration = Duration::from_secs(5);

/// Pause between looks for a token still to be applied.
const TOKEN_INDEX_POLL: Duration = Duration::from_millis(10);

/// Logins tried again when auth changed between the password check and
/// the login's apply (etcd retries the same way); a second change that
/// close is already rare.
const LOGIN_ATTEMPTS: usize = 3;

/// One key or range a request touches, and how.
pub type Touch<'a> = (&'a [u8], &'a [u8], Access);

/// The keys a txn touches: reads for its compares and ranges, writes for
/// its puts and deletes (and reads for what a delete returns), in both
/// branches and nested txns, as etcd's `checkTxnAuth`.
pub fn txn_touches(txn: &pb::TxnRequest) -> Vec<Touch<'_>> {
    use pb::request_op::Request as Op;
    let mut touches: Vec<Touch<'_>> = txn
        .compare
        .iter()
        .map(|c| (&c.key[..], &c.range_end[..], Access::Read))
        .collect();
    for op in txn
        .success
        .iter()
        .chain(&txn.failure)
        .filter_map(|op| op.request.as_ref())
    {
        match op {
            Op::RequestRange(range) => touches.push((&range.key, &range.range_end, Access::Read)),
            Op::RequestPut(put) => {
                touches.push((&put.key, &[], Access::Write));
                if put.prev_kv {
                    touches.push((&put.key, &[], Access::Read));
                }
            }
            Op::RequestDeleteRange(delete) => {
                touches.push((&delete.key, &delete.range_end, Access::Write));
                if delete.prev_kv {
                    touches.push((&delete.key, &delete.range_end, Access::Read));
                }
            }
            Op::RequestTxn(nested) => touches.extend(txn_touches(nested)),
        }
    }
    touches
}

impl Member {
    /// Who makes a request with `metadata` on a connection that proved
    /// `identity`, checked for every one of `touches` at one auth revision.
    /// Costs one atomic load while auth is off.
    pub async fn authorize(
        &self,
        metadata: &MetadataMap,
        extensions: &tonic::Extensions,
        touches: &[Touch<'_>],
    ) -> Result<Caller, RequestError> {
        if !self.auth.enabled() {
            return Ok(Caller::default());
        }
        let user = self.user_of(metadata, extensions).await?;
        self.check(user, touches)
    }

    /// `user`'s permission for every one of `touches`, at one auth
    /// revision.
    fn check(&self, user: String, touches: &[Touch<'_>]) -> Result<Caller, RequestError> {
        let state = self.auth.state();
        for &(key, range_end, access) in touches {
            state.permitted(&user, key, range_end, access)?;
        }
        Ok(Caller {
            user,
            revision: state.revision,
        })
    }

    /// `access` to each of a lease's `keys`.
    fn lease_touches(keys: &BTreeSet<Box<[u8]>>, access: Access) -> Vec<Touch<'_>> {
        keys.iter().map(|key| (&key[..], &[][..], access)).collect()
    }

    /// Whether a read checked for `caller` may still be answered: not if
    /// auth changed since its check, as etcd re-checks after reading.
    pub fn still_authorized(&self, caller: &Caller) -> Result<(), RequestError> {
        if caller.revision != 0 && self.auth.enabled() && self.auth.state().revision != caller.revision {
            return Err(RequestError::AuthOldRevision);
        }
        Ok(())
    }

    /// etcd's check on a request that goes through raft with no
    /// permission of its own (Compact, LeaseGrant, Alarm): a token, if
    /// given, must be valid.
    pub async fn authenticated(
        &self,
        metadata: &MetadataMap,
        extensions: &tonic::Extensions,
    ) -> Result<(), RequestError> {
        if !self.auth.enabled() {
            return Ok(());
        }
        self.user_of(metadata, extensions).await.map(drop)
    }

    /// The caller of a request that needs the root role (auth management,
    /// and some maintenance), checked.
    pub async fn authorize_admin(
        &self,
        metadata: &MetadataMap,
        extensions: &tonic::Extensions,
    ) -> Result<Caller, RequestError> {
        if !self.auth.enabled() {
            return Ok(Caller::default());
        }
        let user = self.user_of(metadata, extensions).await?;
        self.auth.state().admin(&user)?;
        Ok(Caller { user, revision: 0 })
    }

    /// etcd's check before revoking lease `id`: the caller must be root or
    /// may write every key the lease holds, since revoking deletes them
    /// (root passes every permission check). The caller is checked at the
    /// current auth revision, which the revoke carries: a change to auth
    /// before it applies refuses it.
    pub async fn authorize_lease_revoke(
        &self,
        metadata: &MetadataMap,
        extensions: &tonic::Extensions,
        id: i64,
    ) -> Result<Caller, RequestError> {
        if !self.auth.enabled() {
            return Ok(Caller::default());
        }
        let keys = self.store.lease(id).map(|lease| lease.keys).unwrap_or_default();
        self.authorize(metadata, extensions, &Self::lease_touches(&keys, Access::Write))
            .await
    }

    /// etcd's check before LeaseTimeToLive: with auth on, a known caller
    /// that may read every key the lease holds.
    pub async fn authorize_lease_time_to_live(
        &self,
        metadata: &MetadataMap,
        extensions: &tonic::Extensions,
        id: i64,
    ) -> Result<(), RequestError> {
        if !self.auth.enabled() {
            return Ok(());
        }
        let user = self.user_of(metadata, extensions).await?;
        if user.is_empty() {
            return Err(RequestError::UserEmpty);
        }
        let keys = self.store.lease(id).map(|lease| lease.keys).unwrap_or_default();
        self.check(user, &Self::lease_touches(&keys, Access::Read)).map(drop)
    }

    /// The user a request is made as; empty for nobody.
    pub async fn user_of(
        &self,
        metadata: &MetadataMap,
        extensions: &tonic::Extensions,
    ) -> Result<String, RequestError> {
        let token = metadata
            .get("token")
            .or_else(|| metadata.get("authorization"))
            .and_then(|value| value.to_str().ok());
        if let Some(token) = token {
            return self.token_user(token).await;
        }
        if self.config.tls.client_cert_auth {
            if let Some(name) = ConnectionInfo::of(extensions).and_then(|info| info.identity.common_name.clone()) {
                return Ok(name);
            }
        }
        Ok(String::new())
    }

    /// The user of `token`, waiting (at most [`TOKEN_INDEX_WAIT`]) for
    /// the login that made it if this member has not applied it yet.
    async fn token_user(&self, token: &str) -> Result<String, RequestError> {
        let index = token_index(token).ok_or(RequestError::InvalidAuthToken)?;
        let deadline = tokio::time::Instant::now() + TOKEN_INDEX_WAIT;
        loop {
            if let Some(user) = self.auth.tokens.user(token) {
                return Ok(user);
            }
            if self.status.applied() >= index || tokio::time::Instant::now() >= deadline {
                return Err(RequestError::InvalidAuthToken);
            }
            tokio::time::sleep(TOKEN_INDEX_POLL).await;
        }
    }

    /// Proposes an auth change made by `caller` and waits for it.
    pub async fn propose_auth(&self, request: auth_request::Request, caller: &Caller) -> Result<(), RequestError> {
        let request = raft_request::Request::Auth(AuthRequest { request: Some(request) });
        self.propose_as(request, caller).await.map(|_| ())
    }

    /// etcd's Authenticate: checks the password here (bcrypt, off the
    /// async threads), then makes the token through raft so every member
    /// knows it.
    pub async fn authenticate(&self, name: &str, password: &str) -> Result<String, RequestError> {
        // As etcd: the password is checked against every change made
        // before the login, through whichever member.
        self.linearize().await?;
        for _ in 0..LOGIN_ATTEMPTS {
            let state = self.auth.state();
            let revision = self.check_password(&state, name, password).await?;
            let prefix = self.auth.tokens.new_prefix();
            let login = auth_request::Request::Authenticate(AuthenticateRecord {
                name: name.to_string(),
                token_prefix: prefix.clone(),
            });
            let caller = Caller {
                user: name.to_string(),
                revision,
            };
            match self.propose_auth(login, &caller).await {
                Ok(()) => return self.auth.tokens.by_prefix(&prefix).ok_or(RequestError::AuthFailed),
                Err(RequestError::AuthOldRevision) => continue,
                Err(error) => return Err(error),
            }
        }
        Err(RequestError::AuthOldRevision)
    }

    /// The auth revision `password` was found right for `name` at.
    async fn check_password(&self, state: &AuthState, name: &str, password: &str) -> Result<u64, RequestError> {
        if !state.enabled {
            return Err(RequestError::AuthNotEnabled);
        }
        let user = state.users.get(name).ok_or(RequestError::AuthFailed)?;
        if user.options.is_some_and(|o| o.no_password) {
            return Err(RequestError::NoPasswordUser);
        }
        let hash = String::from_utf8_lossy(&user.password).into_owned();
        let password = password.to_string();
        let verified = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
            .await
            .unwrap_or(false);
        if !verified {
            return Err(RequestError::AuthFailed);
        }
        Ok(state.revision)
    }

    /// `password` hashed with bcrypt at `--bcrypt-cost`, off the async
    /// threads (a hash takes tens of milliseconds at etcd's default cost).
    pub async fn hash_password(&self, password: &str) -> Result<String, RequestError> {
        let (password, cost, salt) = (password.to_string(), self.auth.bcrypt_cost, self.auth.salt());
        let hashed = tokio::task::spawn_blocking(move || bcrypt::hash_with_salt(password, cost, salt)).await;
        match hashed {
            // The form `bcrypt::hash` gives, as etcd's Go bcrypt does.
            Ok(Ok(parts)) => Ok(parts.format_for_version(bcrypt::Version::TwoB)),
            _ => Err(RequestError::AuthFailed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::request_op::Request as Op;

    fn op(request: Op) -> pb::RequestOp {
        pb::RequestOp { request: Some(request) }
    }

    // Goal: a txn touches what etcd's `checkTxnAuth` checks: every
    // compare and range for read, every put and delete for write (and
    // for read with `prev_kv`), in both branches and nested txns.
    #[test]
    fn a_txn_touches_both_branches_and_nested_txns() {
        let nested = pb::TxnRequest {
            success: vec![op(Op::RequestPut(pb::PutRequest {
                key: b"deep".to_vec(),
                ..Default::default()
            }))],
            ..Default::default()
        };
        let txn = pb::TxnRequest {
            compare: vec![pb::Compare {
                key: b"c".to_vec(),
                ..Default::default()
            }],
            success: vec![op(Op::RequestRange(pb::RangeRequest {
                key: b"r".to_vec(),
                range_end: b"s".to_vec(),
                ..Default::default()
            }))],
            failure: vec![
                op(Op::RequestDeleteRange(pb::DeleteRangeRequest {
                    key: b"d".to_vec(),
                    prev_kv: true,
                    ..Default::default()
                })),
                op(Op::RequestTxn(nested)),
            ],
        };
        let touched: Vec<(&[u8], &[u8], Access)> = txn_touches(&txn);
        let expected: Vec<(&[u8], &[u8], Access)> = vec![
            (b"c", b"", Access::Read),
            (b"r", b"s", Access::Read),
            (b"d", b"", Access::Write),
            (b"d", b"", Access::Read),
            (b"deep", b"", Access::Write),
        ];
        assert_eq!(touched, expected);
    }
}
