//! The auth state: whether auth is on, its revision, users and roles, and
//! the changes to it, with etcd 3.5's rules and errors. Pure: the apply
//! stage applies changes here in entry order on every member, so every
//! member holds the same state; the store keeps it as one record
//! (`AuthRecord`), rewritten whole by each change.
//!
//! Revisions follow etcd's: a new store's auth revision is 1 (etcd's auth
//! store commits revision 1 when it finds 0); every change that alters
//! users or roles bumps the revision, and so does disabling auth; enabling
//! does not, and a grant that changes nothing does not.

use std::collections::BTreeMap;

use prost::Message as _;

use crate::auth::perms::{Access, Intervals};
use crate::error::RequestError;
use crate::proto::authpb;
use crate::proto::kvserverpb::{auth_request::Request, AuthRecord};

/// The user and role that may do anything.
pub const ROOT: &str = "root";

/// The auth state as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthState {
    pub enabled: bool,
    pub revision: u64,
    pub users: BTreeMap<String, authpb::User>,
    pub roles: BTreeMap<String, authpb::Role>,
}

/// The revision of an auth state no change has touched.
const FIRST_REVISION: u64 = 1;

impl Default for AuthState {
    fn default() -> AuthState {
        AuthState {
            enabled: false,
            revision: FIRST_REVISION,
            users: BTreeMap::new(),
            roles: BTreeMap::new(),
        }
    }
}

impl AuthState {
    /// The state a stored record holds; the empty state for none.
    pub fn decode(record: Option<&[u8]>) -> Result<AuthState, prost::DecodeError> {
        let Some(bytes) = record else {
            return Ok(AuthState::default());
        };
        let record = AuthRecord::decode(bytes)?;
        let name = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        Ok(AuthState {
            enabled: record.enabled,
            revision: record.revision.max(FIRST_REVISION),
            users: record.users.into_iter().map(|u| (name(&u.name), u)).collect(),
            roles: record.roles.into_iter().map(|r| (name(&r.name), r)).collect(),
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        AuthRecord {
            enabled: self.enabled,
            revision: self.revision,
            users: self.users.values().cloned().collect(),
            roles: self.roles.values().cloned().collect(),
        }
        .encode_to_vec()
    }

    /// Whether `user` holds the root role.
    pub fn is_root(&self, user: &str) -> bool {
        self.users.get(user).is_some_and(|u| u.roles.iter().any(|r| r == ROOT))
    }

    /// Whether `user` holds `role`.
    pub fn has_role(&self, user: &str, role: &str) -> bool {
        self.users.get(user).is_some_and(|u| u.roles.iter().any(|r| r == role))
    }

    /// etcd's `IsAdminPermitted` for a known caller.
    pub fn admin(&self, user: &str) -> Result<(), RequestError> {
        if !self.enabled {
            return Ok(());
        }
        if user.is_empty() {
            return Err(RequestError::UserEmpty);
        }
        if !self.users.contains_key(user) {
            return Err(RequestError::UserNotFound);
        }
        if !self.is_root(user) {
            return Err(RequestError::PermissionDenied);
        }
        Ok(())
    }

    /// Whether `user` may `access` `[key, range_end)` (etcd's range
    /// conventions: empty `range_end` is the key alone, `\0` is every key
    /// from `key` on).
    pub fn permitted(&self, user: &str, key: &[u8], range_end: &[u8], access: Access) -> Result<(), RequestError> {
        if !self.enabled {
            return Ok(());
        }
        if user.is_empty() {
            return Err(RequestError::UserEmpty);
        }
        let Some(found) = self.users.get(user) else {
            return Err(RequestError::PermissionDenied);
        };
        if found.roles.iter().any(|r| r == ROOT) {
            return Ok(());
        }
        let permissions = found
            .roles
            .iter()
            .filter_map(|role| self.roles.get(role))
            .flat_map(|role| &role.key_permission);
        if Intervals::granting(permissions, access).covers(key, range_end) {
            Ok(())
        } else {
            Err(RequestError::PermissionDenied)
        }
    }

    /// Applies one change, as etcd's auth store does at apply time.
    pub fn apply(&mut self, request: &Request) -> Result<(), RequestError> {
        match request {
            Request::Enable(_) => self.enable(),
            Request::Disable(_) => {
                if self.enabled {
                    self.enabled = false;
                    self.revision += 1;
                }
                Ok(())
            }
            Request::Authenticate(login) => {
                if !self.enabled {
                    return Err(RequestError::AuthNotEnabled);
                }
                match self.users.get(&login.name) {
                    Some(user) if !user.options.is_some_and(|o| o.no_password) => Ok(()),
                    _ => Err(RequestError::AuthFailed),
                }
            }
            Request::UserAdd(add) => self.user_add(add),
            Request::UserDelete(delete) => {
                if self.enabled && delete.name == ROOT {
                    return Err(RequestError::InvalidAuthManagement);
                }
                self.users.remove(&delete.name).ok_or(RequestError::UserNotFound)?;
                self.bump()
            }
            Request::UserChangePassword(change) => {
                let user = self.users.get_mut(&change.name).ok_or(RequestError::UserNotFound)?;
                if !user.options.is_some_and(|o| o.no_password) {
                    user.password = change.hashed_password.clone().into_bytes();
                }
                self.bump()
            }
            Request::UserGrantRole(grant) => self.user_grant_role(&grant.user, &grant.role),
            Request::UserRevokeRole(revoke) => self.user_revoke_role(&revoke.name, &revoke.role),
            Request::RoleAdd(add) => {
                if add.name.is_empty() {
                    return Err(RequestError::RoleEmpty);
                }
                if self.roles.contains_key(&add.name) {
                    return Err(RequestError::RoleAlreadyExists);
                }
                let role = authpb::Role {
                    name: add.name.clone().into_bytes(),
                    key_permission: Vec::new(),
                };
                self.roles.insert(add.name.clone(), role);
                self.bump()
            }
            Request::RoleDelete(delete) => self.role_delete(&delete.role),
            Request::RoleGrantPermission(grant) => {
                let permission = grant.perm.as_ref().ok_or(RequestError::PermissionNotGiven)?;
                self.role_grant_permission(&grant.name, permission)
            }
            Request::RoleRevokePermission(revoke) => {
                let role = self.roles.get_mut(&revoke.role).ok_or(RequestError::RoleNotFound)?;
                let before = role.key_permission.len();
                role.key_permission
                    .retain(|p| p.key != revoke.key || p.range_end != revoke.range_end);
                if role.key_permission.len() == before {
                    return Err(RequestError::PermissionNotGranted);
                }
                self.bump()
            }
        }
    }

    fn bump(&mut self) -> Result<(), RequestError> {
        self.revision += 1;
        Ok(())
    }

    fn enable(&mut self) -> Result<(), RequestError> {
        if self.enabled {
            return Ok(());
        }
        if !self.users.contains_key(ROOT) {
            return Err(RequestError::RootUserNotExist);
        }
        if !self.is_root(ROOT) {
            return Err(RequestError::RootRoleNotExist);
        }
        self.enabled = true;
        Ok(())
    }

    fn user_add(&mut self, add: &crate::proto::etcdserverpb::AuthUserAddRequest) -> Result<(), RequestError> {
        if add.name.is_empty() {
            return Err(RequestError::UserEmpty);
        }
        if self.users.contains_key(&add.name) {
            return Err(RequestError::UserAlreadyExists);
        }
        let options = add.options.unwrap_or_default();
        let password = if options.no_password {
            Vec::new()
        } else {
            add.hashed_password.clone().into_bytes()
        };
        let user = authpb::User {
            name: add.name.clone().into_bytes(),
            password,
            roles: Vec::new(),
            options: Some(options),
        };
        self.users.insert(add.name.clone(), user);
        self.bump()
    }

    fn user_grant_role(&mut self, name: &str, role: &str) -> Result<(), RequestError> {
        if !self.users.contains_key(name) {
            return Err(RequestError::UserNotFound);
        }
        if role != ROOT && !self.roles.contains_key(role) {
            return Err(RequestError::RoleNotFound);
        }
        let user = self.users.get_mut(name).expect("checked above");
        if user.roles.iter().any(|r| r == role) {
            return Ok(());
        }
        user.roles.push(role.to_string());
        user.roles.sort();
        self.bump()
    }

    fn user_revoke_role(&mut self, name: &str, role: &str) -> Result<(), RequestError> {
        if self.enabled && name == ROOT && role == ROOT {
            return Err(RequestError::InvalidAuthManagement);
        }
        let user = self.users.get_mut(name).ok_or(RequestError::UserNotFound)?;
        let before = user.roles.len();
        user.roles.retain(|r| r != role);
        if user.roles.len() == before {
            return Err(RequestError::RoleNotGranted);
        }
        self.bump()
    }

    fn role_delete(&mut self, role: &str) -> Result<(), RequestError> {
        if self.enabled && role == ROOT {
            return Err(RequestError::InvalidAuthManagement);
        }
        self.roles.remove(role).ok_or(RequestError::RoleNotFound)?;
        for user in self.users.values_mut() {
            user.roles.retain(|r| r != role);
        }
        self.bump()
    }

    fn role_grant_permission(&mut self, name: &str, permission: &authpb::Permission) -> Result<(), RequestError> {
        if !valid_permission_range(&permission.key, &permission.range_end) {
            return Err(RequestError::InvalidAuthManagement);
        }
        let role = self.roles.get_mut(name).ok_or(RequestError::RoleNotFound)?;
        let existing = role
            .key_permission
            .iter_mut()
            .find(|p| p.key == permission.key && p.range_end == permission.range_end);
        match existing {
            Some(existing) => existing.perm_type = permission.perm_type,
            None => {
                role.key_permission.push(permission.clone());
                role.key_permission.sort_by(|a, b| a.key.cmp(&b.key));
            }
        }
        self.bump()
    }
}

/// etcd's `isValidPermissionRange`: a key, and an end that is empty (the
/// key alone), `\0` (every key from it on), or above the key.
fn valid_permission_range(key: &[u8], range_end: &[u8]) -> bool {
    if key.is_empty() {
        return false;
    }
    range_end.is_empty() || range_end == [0] || key < range_end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::etcdserverpb as pb;

    /// A result as its message, so tests compare etcd's texts.
    fn said(result: Result<(), RequestError>) -> Result<(), String> {
        result.map_err(|e| e.to_string())
    }

    fn refused(error: RequestError) -> Result<(), String> {
        Err(error.to_string())
    }

    fn user_add(name: &str) -> Request {
        Request::UserAdd(pb::AuthUserAddRequest {
            name: name.into(),
            hashed_password: "hash".into(),
            ..Default::default()
        })
    }

    fn grant(user: &str, role: &str) -> Request {
        Request::UserGrantRole(pb::AuthUserGrantRoleRequest {
            user: user.into(),
            role: role.into(),
        })
    }

    fn permission(role: &str, key: &[u8], range_end: &[u8], kind: authpb::permission::Type) -> Request {
        Request::RoleGrantPermission(pb::AuthRoleGrantPermissionRequest {
            name: role.into(),
            perm: Some(authpb::Permission {
                perm_type: kind as i32,
                key: key.to_vec(),
                range_end: range_end.to_vec(),
            }),
        })
    }

    // Goal: etcd's order of refusals for enabling auth, and the revision
    // rules (a change bumps it, enabling and an idle grant do not).
    #[test]
    fn enabling_needs_root_with_the_root_role() {
        let mut state = AuthState::default();
        assert_eq!(
            said(state.apply(&Request::Enable(Default::default()))),
            refused(RequestError::RootUserNotExist)
        );
        state.apply(&user_add(ROOT)).unwrap();
        assert_eq!(
            said(state.apply(&Request::Enable(Default::default()))),
            refused(RequestError::RootRoleNotExist)
        );
        state.apply(&grant(ROOT, ROOT)).unwrap();
        let before = state.revision;
        state.apply(&grant(ROOT, ROOT)).unwrap();
        assert_eq!(state.revision, before, "an idle grant keeps the revision");
        state.apply(&Request::Enable(Default::default())).unwrap();
        assert!(state.enabled);
        assert_eq!(state.revision, before, "enabling keeps the revision");
        let delete_root = Request::UserDelete(pb::AuthUserDeleteRequest { name: ROOT.into() });
        assert_eq!(
            said(state.apply(&delete_root)),
            refused(RequestError::InvalidAuthManagement)
        );
        state.apply(&Request::Disable(Default::default())).unwrap();
        assert_eq!(state.revision, before + 1, "disabling bumps the revision");
        assert_eq!(AuthState::decode(Some(&state.encode())).unwrap(), state);
    }

    // Goal: a prefix grant covers keys and ranges inside the prefix and
    // nothing outside it; read-only grants refuse writes; revoking takes
    // the access away.
    #[test]
    fn permissions_follow_grants() {
        let mut state = AuthState::default();
        for request in [
            user_add(ROOT),
            grant(ROOT, ROOT),
            user_add("alice"),
            Request::RoleAdd(pb::AuthRoleAddRequest { name: "a".into() }),
            permission("a", b"alice/", b"alice0", authpb::permission::Type::Readwrite),
            permission("a", b"shared", b"", authpb::permission::Type::Read),
            grant("alice", "a"),
            Request::Enable(Default::default()),
        ] {
            state.apply(&request).unwrap();
        }
        assert_eq!(said(state.permitted("alice", b"alice/x", b"", Access::Write)), Ok(()));
        assert_eq!(
            said(state.permitted("alice", b"alice/", b"alice0", Access::Read)),
            Ok(())
        );
        assert_eq!(said(state.permitted("alice", b"shared", b"", Access::Read)), Ok(()));
        for (key, end, access) in [
            (&b"bob/x"[..], &b""[..], Access::Write),
            (b"alice/", b"\0", Access::Read),
            (b"shared", b"", Access::Write),
            (b"alice/", b"alice1", Access::Read),
        ] {
            assert_eq!(
                said(state.permitted("alice", key, end, access)),
                refused(RequestError::PermissionDenied),
                "{key:?}..{end:?}"
            );
        }
        assert_eq!(said(state.permitted("root", b"anything", b"\0", Access::Write)), Ok(()));
        assert_eq!(
            said(state.permitted("", b"k", b"", Access::Read)),
            refused(RequestError::UserEmpty)
        );
        let revoke = Request::RoleRevokePermission(pb::AuthRoleRevokePermissionRequest {
            role: "a".into(),
            key: b"alice/".to_vec(),
            range_end: b"alice0".to_vec(),
        });
        state.apply(&revoke).unwrap();
        assert_eq!(said(state.apply(&revoke)), refused(RequestError::PermissionNotGranted));
        assert_eq!(
            said(state.permitted("alice", b"alice/y", b"", Access::Write)),
            refused(RequestError::PermissionDenied)
        );
    }
}
