//! etcd's `Auth` service. Changes go through raft (see `auth::operations`);
//! once auth is on, every call but Authenticate needs the root role,
//! except that a user may read itself and the roles it holds, as in etcd.
//! Reads wait for a ReadIndex round first, so they see every change
//! acknowledged before them.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::auth::state::AuthState;
use crate::auth::Caller;
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::auth_server::Auth;
use crate::proto::kvserverpb::auth_request::Request as Change;

#[derive(Clone)]
pub struct AuthService {
    pub member: Arc<Member>,
}

impl AuthService {
    async fn admin<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        Ok(self
            .member
            .authorize_admin(request.metadata(), request.extensions())
            .await?)
    }

    /// Checks the caller is root, proposes `change` and answers with a
    /// header.
    async fn change<T>(&self, request: &Request<T>, change: Change) -> Result<Option<pb::ResponseHeader>, Status> {
        let caller = self.admin(request).await?;
        self.change_as(&caller, change).await
    }

    /// Proposes `change` made by `caller`, already checked as root.
    async fn change_as(&self, caller: &Caller, change: Change) -> Result<Option<pb::ResponseHeader>, Status> {
        self.member.propose_auth(change, caller).await?;
        Ok(self.member.current_header())
    }

    /// Checks the caller is root, or that `allowed` lets this caller read
    /// what it asks for (itself, a role it holds), as etcd's applier does.
    async fn admin_or<T>(
        &self,
        request: &Request<T>,
        allowed: impl FnOnce(&AuthState, &str) -> bool,
    ) -> Result<(), Status> {
        if !self.member.auth_enabled() {
            return Ok(());
        }
        let user = self.member.user_of(request.metadata(), request.extensions()).await?;
        let state = self.member.auth_state();
        match state.admin(&user) {
            Err(_) if allowed(&state, &user) => Ok(()),
            checked => Ok(checked?),
        }
    }

    /// Waits until this member has applied every change acknowledged
    /// before the call.
    async fn linearized(&self) -> Result<(), Status> {
        Ok(self.member.linearize().await?)
    }
}

/// An answer made of a header alone.
macro_rules! header_only {
    ($response:ident, $header:expr) => {
        Ok(Response::new(pb::$response { header: $header }))
    };
}

#[tonic::async_trait]
impl Auth for AuthService {
    async fn auth_enable(
        &self,
        request: Request<pb::AuthEnableRequest>,
    ) -> Result<Response<pb::AuthEnableResponse>, Status> {
        let change = Change::Enable(*request.get_ref());
        header_only!(AuthEnableResponse, self.change(&request, change).await?)
    }

    async fn auth_disable(
        &self,
        request: Request<pb::AuthDisableRequest>,
    ) -> Result<Response<pb::AuthDisableResponse>, Status> {
        let change = Change::Disable(*request.get_ref());
        header_only!(AuthDisableResponse, self.change(&request, change).await?)
    }

    async fn auth_status(
        &self,
        request: Request<pb::AuthStatusRequest>,
    ) -> Result<Response<pb::AuthStatusResponse>, Status> {
        self.admin(&request).await?;
        self.linearized().await?;
        let state = self.member.auth_state();
        Ok(Response::new(pb::AuthStatusResponse {
            header: self.member.current_header(),
            enabled: state.enabled,
            auth_revision: state.revision,
        }))
    }

    async fn authenticate(
        &self,
        request: Request<pb::AuthenticateRequest>,
    ) -> Result<Response<pb::AuthenticateResponse>, Status> {
        let login = request.into_inner();
        let token = self.member.authenticate(&login.name, &login.password).await?;
        Ok(Response::new(pb::AuthenticateResponse {
            header: self.member.current_header(),
            token,
        }))
    }

    async fn user_add(
        &self,
        request: Request<pb::AuthUserAddRequest>,
    ) -> Result<Response<pb::AuthUserAddResponse>, Status> {
        let caller = self.admin(&request).await?;
        let mut add = request.get_ref().clone();
        if !add.options.is_some_and(|o| o.no_password) && add.hashed_password.is_empty() {
            add.hashed_password = self.member.hash_password(&add.password).await?;
        }
        add.password.clear();
        header_only!(
            AuthUserAddResponse,
            self.change_as(&caller, Change::UserAdd(add)).await?
        )
    }

    async fn user_get(
        &self,
        request: Request<pb::AuthUserGetRequest>,
    ) -> Result<Response<pb::AuthUserGetResponse>, Status> {
        let name = &request.get_ref().name;
        self.admin_or(&request, |_, user| user == name).await?;
        self.linearized().await?;
        let state = self.member.auth_state();
        let user = state.users.get(name).ok_or(crate::error::RequestError::UserNotFound)?;
        Ok(Response::new(pb::AuthUserGetResponse {
            header: self.member.current_header(),
            roles: user.roles.clone(),
        }))
    }

    async fn user_list(
        &self,
        request: Request<pb::AuthUserListRequest>,
    ) -> Result<Response<pb::AuthUserListResponse>, Status> {
        self.admin(&request).await?;
        self.linearized().await?;
        Ok(Response::new(pb::AuthUserListResponse {
            header: self.member.current_header(),
            users: self.member.auth_state().users.keys().cloned().collect(),
        }))
    }

    async fn user_delete(
        &self,
        request: Request<pb::AuthUserDeleteRequest>,
    ) -> Result<Response<pb::AuthUserDeleteResponse>, Status> {
        let change = Change::UserDelete(request.get_ref().clone());
        header_only!(AuthUserDeleteResponse, self.change(&request, change).await?)
    }

    async fn user_change_password(
        &self,
        request: Request<pb::AuthUserChangePasswordRequest>,
    ) -> Result<Response<pb::AuthUserChangePasswordResponse>, Status> {
        let caller = self.admin(&request).await?;
        let mut change = request.get_ref().clone();
        // An empty password stays an empty hash, which no login matches,
        // as in etcd.
        if change.hashed_password.is_empty() && !change.password.is_empty() {
            change.hashed_password = self.member.hash_password(&change.password).await?;
        }
        change.password.clear();
        let change = Change::UserChangePassword(change);
        header_only!(AuthUserChangePasswordResponse, self.change_as(&caller, change).await?)
    }

    async fn user_grant_role(
        &self,
        request: Request<pb::AuthUserGrantRoleRequest>,
    ) -> Result<Response<pb::AuthUserGrantRoleResponse>, Status> {
        let change = Change::UserGrantRole(request.get_ref().clone());
        header_only!(AuthUserGrantRoleResponse, self.change(&request, change).await?)
    }

    async fn user_revoke_role(
        &self,
        request: Request<pb::AuthUserRevokeRoleRequest>,
    ) -> Result<Response<pb::AuthUserRevokeRoleResponse>, Status> {
        let change = Change::UserRevokeRole(request.get_ref().clone());
        header_only!(AuthUserRevokeRoleResponse, self.change(&request, change).await?)
    }

    async fn role_add(
        &self,
        request: Request<pb::AuthRoleAddRequest>,
    ) -> Result<Response<pb::AuthRoleAddResponse>, Status> {
        let change = Change::RoleAdd(request.get_ref().clone());
        header_only!(AuthRoleAddResponse, self.change(&request, change).await?)
    }

    async fn role_get(
        &self,
        request: Request<pb::AuthRoleGetRequest>,
    ) -> Result<Response<pb::AuthRoleGetResponse>, Status> {
        let role = &request.get_ref().role;
        self.admin_or(&request, |state, user| state.has_role(user, role))
            .await?;
        self.linearized().await?;
        let state = self.member.auth_state();
        let found = state.roles.get(role).ok_or(crate::error::RequestError::RoleNotFound)?;
        Ok(Response::new(pb::AuthRoleGetResponse {
            header: self.member.current_header(),
            perm: found.key_permission.clone(),
        }))
    }

    async fn role_list(
        &self,
        request: Request<pb::AuthRoleListRequest>,
    ) -> Result<Response<pb::AuthRoleListResponse>, Status> {
        self.admin(&request).await?;
        self.linearized().await?;
        Ok(Response::new(pb::AuthRoleListResponse {
            header: self.member.current_header(),
            roles: self.member.auth_state().roles.keys().cloned().collect(),
        }))
    }

    async fn role_delete(
        &self,
        request: Request<pb::AuthRoleDeleteRequest>,
    ) -> Result<Response<pb::AuthRoleDeleteResponse>, Status> {
        let change = Change::RoleDelete(request.get_ref().clone());
        header_only!(AuthRoleDeleteResponse, self.change(&request, change).await?)
    }

    async fn role_grant_permission(
        &self,
        request: Request<pb::AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<pb::AuthRoleGrantPermissionResponse>, Status> {
        let change = Change::RoleGrantPermission(request.get_ref().clone());
        header_only!(AuthRoleGrantPermissionResponse, self.change(&request, change).await?)
    }

    async fn role_revoke_permission(
        &self,
        request: Request<pb::AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<pb::AuthRoleRevokePermissionResponse>, Status> {
        let change = Change::RoleRevokePermission(request.get_ref().clone());
        header_only!(AuthRoleRevokePermissionResponse, self.change(&request, change).await?)
    }
}
