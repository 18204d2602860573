//! Members' client URLs, as each member published them through raft.
//!
//! A member proposes its attributes once it starts (`server::tasks`); the
//! apply stage records them here on every member, and `MemberList`
//! answers from them. They are kept in `member/attributes.json` (a map of
//! member id to URLs) so a restarted member lists the others before they
//! publish again.

use std::collections::HashMap;
use std::path::PathBuf;

use parking_lot::Mutex;

/// Published client URLs, by member id.
pub type ClientUrls = HashMap<u64, Vec<String>>;

pub struct MemberAttributes {
    path: PathBuf,
    urls: Mutex<ClientUrls>,
}

impl MemberAttributes {
    /// The attributes kept at `path`; none if the file is missing or
    /// unreadable (members publish again when they start).
    pub fn load(path: PathBuf) -> MemberAttributes {
        let urls = std::fs::read_to_string(&path)
            .ok()
            .and_then(|json| serde_json::from_str(&json).ok())
            .unwrap_or_default();
        MemberAttributes {
            path,
            urls: Mutex::new(urls),
        }
    }

    /// Records a member's URLs and keeps the file up to date. A failed
    /// write is only logged: the URLs are published again on restart.
    pub fn publish(&self, id: u64, client_urls: Vec<String>) {
        let mut urls = self.urls.lock();
        if urls.get(&id) == Some(&client_urls) {
            return;
        }
        urls.insert(id, client_urls);
        let json = serde_json::to_string(&*urls).expect("urls serialize");
        if let Err(error) = std::fs::write(&self.path, json) {
            tracing::warn!(%error, path = %self.path.display(), "could not keep member attributes");
        }
    }

    pub fn client_urls(&self) -> ClientUrls {
        self.urls.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: published URLs survive a reload from the file.
    #[test]
    fn published_urls_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attributes.json");
        let attributes = MemberAttributes::load(path.clone());
        attributes.publish(7, vec!["http://a:2379".into()]);
        let reloaded = MemberAttributes::load(path);
        assert_eq!(reloaded.client_urls().get(&7), Some(&vec!["http://a:2379".to_string()]));
    }
}
