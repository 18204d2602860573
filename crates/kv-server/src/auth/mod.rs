//! etcd's auth: users, roles, key permissions and simple tokens.
//!
//! - [`state`]: the replicated auth state and its changes (pure; the
//!   apply stage applies them in entry order on every member).
//! - [`perms`]: key permissions as intervals, and whether they cover a
//!   request.
//! - [`tokens`]: simple tokens, in each member's memory.
//! - [`operations`]: who a request is from and whether they may make it;
//!   the Auth service's changes, logins and password hashing, as the
//!   member core's methods (`api::auth` is the gRPC adapter).
//!
//! [`Auth`] is what the member shares between the API (who is calling,
//! may they) and the apply stage (the state after each change). With auth
//! off, a request's whole cost is one atomic load.
//!
//! # Checks and revisions
//! The API checks each request's permissions against the auth state as
//! it stands, and sends the auth revision it checked at with the
//! proposal. The apply stage refuses a request whose revision is older
//! than the state's with "revision of auth store is old" (etcd's clients
//! then log in again and retry), so a write checked before a revocation
//! never applies after it.

pub mod operations;
pub mod perms;
pub mod state;
pub mod tokens;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::auth::state::AuthState;
use crate::auth::tokens::Tokens;
use crate::clock::Clock;
use crate::entropy::Entropy;

/// etcd's default `--bcrypt-cost`.
pub const BCRYPT_COST_DEFAULT: u32 = 10;

/// Who makes a request, and the auth revision that was checked at; the
/// default (no user, revision 0) when auth is off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
    pub revision: u64,
}

/// The auth state a member serves from, and its tokens.
pub struct Auth {
    state: RwLock<Arc<AuthState>>,
    enabled: AtomicBool,
    pub tokens: Tokens,
    pub bcrypt_cost: u32,
    entropy: Arc<dyn Entropy>,
}

impl Auth {
    /// Tokens expire on `clock`; token prefixes and password salts are
    /// drawn from `entropy`.
    pub fn new(
        state: AuthState,
        token_ttl: Duration,
        bcrypt_cost: u32,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Auth {
        Auth {
            enabled: AtomicBool::new(state.enabled),
            state: RwLock::new(Arc::new(state)),
            tokens: Tokens::new(token_ttl, clock, entropy.clone()),
            bcrypt_cost,
            entropy,
        }
    }

    /// A fresh salt for a password hash.
    pub fn salt(&self) -> [u8; 16] {
        let (high, low) = (self.entropy.next_u64(), self.entropy.next_u64());
        ((u128::from(high) << 64) | u128::from(low)).to_le_bytes()
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    pub fn state(&self) -> Arc<AuthState> {
        self.state.read().clone()
    }

    /// The state after applied changes; ends every token when auth went
    /// off.
    pub fn publish(&self, state: AuthState) {
        let enabled = state.enabled;
        *self.state.write() = Arc::new(state);
        self.enabled.store(enabled, Ordering::Release);
        if !enabled {
            self.tokens.clear();
        }
    }
}
