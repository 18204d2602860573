//! etcd's `Cluster` service. MemberList answers from the initial cluster
//! and the client URLs members published; membership changes answer
//! Unimplemented until they exist.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::cluster_server::Cluster;

pub struct ClusterService {
    pub member: Arc<Member>,
}

fn unimplemented(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not supported by this server yet"))
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(&self, _: Request<pb::MemberAddRequest>) -> Result<Response<pb::MemberAddResponse>, Status> {
        Err(unimplemented("MemberAdd"))
    }

    async fn member_remove(
        &self,
        _: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        Err(unimplemented("MemberRemove"))
    }

    async fn member_update(
        &self,
        _: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        Err(unimplemented("MemberUpdate"))
    }

    async fn member_list(&self, _: Request<pb::MemberListRequest>) -> Result<Response<pb::MemberListResponse>, Status> {
        let urls = self.member.attributes.client_urls();
        // etcd lists members by id, and its MemberList header carries no
        // revision.
        let mut sorted: Vec<_> = self.member.membership.members.iter().collect();
        sorted.sort_by_key(|m| m.id);
        let members = sorted
            .into_iter()
            .map(|member| pb::Member {
                id: member.id,
                name: member.name.clone(),
                peer_ur_ls: member.peer_urls.clone(),
                client_ur_ls: urls.get(&member.id).cloned().unwrap_or_default(),
                is_learner: false,
            })
            .collect();
        Ok(Response::new(pb::MemberListResponse {
            header: self.member.header(0),
            members,
        }))
    }

    async fn member_promote(
        &self,
        _: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        Err(unimplemented("MemberPromote"))
    }
}
