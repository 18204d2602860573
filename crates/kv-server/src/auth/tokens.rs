//! etcd's simple tokens: `<16 random letters>.<raft index>`, made by a
//! login that went through raft, so every member that applied it knows
//! the token. Tokens live in memory only: a restarted member forgets them
//! (etcd's members too) and clients log in again, as etcd's clients do on
//! "invalid auth token". Each expires `--auth-token-ttl` after its last
//! use; changing a user's password or deleting the user ends its tokens,
//! and disabling auth ends them all.
//!
//! The table is bounded by the cost of a login: each takes a bcrypt
//! comparison (tens of milliseconds of CPU at etcd's default cost), so a
//! member makes at most a few thousand tokens per TTL per core.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::clock::Clock;
use crate::entropy::Entropy;

/// Letters in a token's random prefix, as etcd's.
pub const TOKEN_PREFIX_LETTERS: usize = 16;

/// etcd's default `--auth-token-ttl`: 300 seconds.
pub const TOKEN_TTL_DEFAULT_SECONDS: u64 = 300;

/// The tokens this member knows: token → (user, expiry), expiries on the
/// member's clock.
pub struct Tokens {
    ttl: Duration,
    tokens: Mutex<HashMap<String, (String, Instant)>>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
}

/// The raft index a token was made at, if it has etcd's shape.
pub fn token_index(token: &str) -> Option<u64> {
    let (_, index) = token.split_once('.')?;
    index.parse().ok()
}

impl Tokens {
    pub fn new(ttl: Duration, clock: Arc<dyn Clock>, entropy: Arc<dyn Entropy>) -> Tokens {
        Tokens {
            ttl,
            tokens: Mutex::new(HashMap::new()),
            clock,
            entropy,
        }
    }

    /// A fresh random prefix for a login.
    pub fn new_prefix(&self) -> String {
        const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        (0..TOKEN_PREFIX_LETTERS)
            .map(|_| LETTERS[(self.entropy.next_u64() % LETTERS.len() as u64) as usize] as char)
            .collect()
    }

    /// The token a login with `prefix` at raft `index` makes for `user`.
    pub fn assign(&self, prefix: &str, index: u64, user: &str) -> String {
        let token = format!("{prefix}.{index}");
        let expires = self.clock.now() + self.ttl;
        self.tokens.lock().insert(token.clone(), (user.to_string(), expires));
        token
    }

    /// The user of a live token, whose life starts over with this use.
    pub fn user(&self, token: &str) -> Option<String> {
        let mut tokens = self.tokens.lock();
        let now = self.clock.now();
        let (user, expires) = tokens.get_mut(token)?;
        if *expires <= now {
            tokens.remove(token);
            return None;
        }
        *expires = now + self.ttl;
        Some(user.clone())
    }

    /// The token a login with `prefix` made on this member, if any.
    pub fn by_prefix(&self, prefix: &str) -> Option<String> {
        let tokens = self.tokens.lock();
        tokens
            .keys()
            .find(|token| token.split_once('.').is_some_and(|(p, _)| p == prefix))
            .cloned()
    }

    /// Ends every token of `user`.
    pub fn invalidate_user(&self, user: &str) {
        self.tokens.lock().retain(|_, (owner, _)| owner != user);
    }

    /// Ends every token.
    pub fn clear(&self) {
        self.tokens.lock().clear();
    }

    /// Forgets expired tokens; the server calls this every second.
    pub fn sweep(&self) {
        let now = self.clock.now();
        self.tokens.lock().retain(|_, (_, expires)| *expires > now);
    }

    pub fn len(&self) -> usize {
        self.tokens.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a token names its user until its TTL passes unused, and a
    // user's tokens end together.
    #[test]
    fn tokens_expire_and_end_with_their_user() {
        let tokens = Tokens::new(
            Duration::from_millis(50),
            Arc::new(crate::clock::RealClock),
            Arc::new(crate::entropy::OsEntropy),
        );
        let prefix = tokens.new_prefix();
        assert_eq!(prefix.len(), TOKEN_PREFIX_LETTERS);
        let token = tokens.assign(&prefix, 7, "alice");
        assert_eq!(token_index(&token), Some(7));
        assert_eq!(tokens.by_prefix(&prefix).as_deref(), Some(token.as_str()));
        assert_eq!(tokens.user(&token).as_deref(), Some("alice"));
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(tokens.user(&token), None, "expired");
        let again = tokens.assign(&tokens.new_prefix(), 8, "alice");
        let other = tokens.assign(&tokens.new_prefix(), 9, "bob");
        tokens.invalidate_user("alice");
        assert_eq!(tokens.user(&again), None);
        assert_eq!(tokens.user(&other).as_deref(), Some("bob"));
        std::thread::sleep(Duration::from_millis(80));
        tokens.sweep();
        assert_eq!(tokens.len(), 0);
    }
}
