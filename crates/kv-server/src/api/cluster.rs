//! etcd's `Cluster` service: lists the members, and changes the
//! membership through the member core (`member::reconfigure`), for root
//! alone when auth is on.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::cluster_server::Cluster;

pub struct ClusterService {
    pub member: Arc<Member>,
}

impl ClusterService {
    /// As etcd: with auth on, only root changes the membership (listing
    /// it needs nothing).
    async fn admin<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.member
            .authorize_admin(request.metadata(), request.extensions())
            .await?;
        Ok(())
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(
        &self,
        request: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        self.admin(&request).await?;
        let request = request.into_inner();
        let (member, members) = self.member.add_member(request.peer_ur_ls, request.is_learner).await?;
        Ok(Response::new(pb::MemberAddResponse {
            header: self.member.header(0),
            member: Some(member),
            members,
        }))
    }

    async fn member_remove(
        &self,
        request: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        self.admin(&request).await?;
        let members = self.member.remove_member(request.into_inner().id).await?;
        Ok(Response::new(pb::MemberRemoveResponse {
            header: self.member.header(0),
            members,
        }))
    }

    async fn member_update(
        &self,
        request: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        self.admin(&request).await?;
        let request = request.into_inner();
        let members = self.member.update_member(request.id, request.peer_ur_ls).await?;
        Ok(Response::new(pb::MemberUpdateResponse {
            header: self.member.header(0),
            members,
        }))
    }

    async fn member_list(&self, _: Request<pb::MemberListRequest>) -> Result<Response<pb::MemberListResponse>, Status> {
        // etcd's MemberList header carries no revision.
        Ok(Response::new(pb::MemberListResponse {
            header: self.member.header(0),
            members: self.member.member_list(),
        }))
    }

    async fn member_promote(
        &self,
        request: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        self.admin(&request).await?;
        let members = self.member.promote_member(request.into_inner().id).await?;
        Ok(Response::new(pb::MemberPromoteResponse {
            header: self.member.header(0),
            members,
        }))
    }
}
