//! Epoll-in-epoll topology: cycle and depth checks at `add`, as the kernel makes them
//! (docs/semantics.md §4.9): adding epoll `T` to epoll `E` fails with `ELOOP` if
//! `E` is reachable from `T` (a cycle), or if `down(T) + 1 + up(E) > EP_MAX_NESTS` (4), the
//! longest chains of links below `T` and above `E`: at most 5 epolls in any chain.
//!
//! # LOCKING
//!
//! ```text
//! TOPOLOGY        global Mutex<()>: serialises every change of an epoll→epoll link and every
//!                 check, like the kernel's epnested_mutex. Taken before any EpInner::registry.
//! EpInner::links  Mutex<Links>: leaf lock; written only with TOPOLOGY held.
//! ```

use std::io;
use std::sync::{Arc, Weak};

use super::EpInner;

/// The kernel's `EP_MAX_NESTS`: at most 4 epoll-in-epoll links in any chain (5 levels).
pub(crate) const MAX_NESTS: usize = 4;

/// The topology lock. Defined in `sys::fork`, whose atfork handlers hold it across a fork.
pub(crate) use crate::sys::fork::TOPOLOGY;

/// An epoll's links to other epolls.
#[derive(Default)]
pub(crate) struct Links {
    /// Epolls this one watches.
    pub(crate) children: Vec<Weak<EpInner>>,
    /// Epolls that watch this one.
    pub(crate) parents: Vec<Weak<EpInner>>,
}

fn live(v: &[Weak<EpInner>]) -> Vec<Arc<EpInner>> {
    v.iter()
        .filter_map(Weak::upgrade)
        .filter(|e| !e.is_closed())
        .collect()
}

/// Longest chain of links below `e`. Must be called with TOPOLOGY held.
fn down(e: &EpInner) -> usize {
    let kids = live(&crate::loom::lock(&e.links).children);
    kids.iter().map(|k| 1 + down(k)).max().unwrap_or(0)
}

/// Longest chain of links above `e`. Must be called with TOPOLOGY held.
fn up(e: &EpInner) -> usize {
    let ps = live(&crate::loom::lock(&e.links).parents);
    ps.iter().map(|p| 1 + up(p)).max().unwrap_or(0)
}

/// Whether `target` can reach `id` through child links. Must be called with TOPOLOGY held.
fn reaches(from: &EpInner, id: u64) -> bool {
    if from.id == id {
        return true;
    }
    live(&crate::loom::lock(&from.links).children)
        .iter()
        .any(|k| reaches(k, id))
}

/// `ELOOP`, as the kernel answers, for the reason `_why` (see `crate::error`).
fn eloop(_why: &str) -> io::Error {
    crate::error::too_deep()
}

/// May `child` be added to `parent`? Must be called with TOPOLOGY held.
pub(crate) fn check_add(parent: &EpInner, child: &EpInner) -> io::Result<()> {
    if reaches(child, parent.id) {
        return Err(eloop(
            "adding this epoll would create a cycle of epolls (ELOOP)",
        ));
    }
    if down(child) + 1 + up(parent) > MAX_NESTS {
        return Err(eloop(
            "adding this epoll would nest epolls more than 5 levels deep (ELOOP)",
        ));
    }
    Ok(())
}

/// Record the link `parent → child`. Must be called with TOPOLOGY held.
pub(crate) fn link(parent: &Arc<EpInner>, child: &Arc<EpInner>) {
    let alive = |w: &Weak<EpInner>| w.upgrade().is_some_and(|e| !e.is_closed());
    let mut pl = crate::loom::lock(&parent.links);
    pl.children.retain(alive);
    pl.children.push(Arc::downgrade(child));
    drop(pl);
    let mut cl = crate::loom::lock(&child.links);
    cl.parents.retain(alive);
    cl.parents.push(Arc::downgrade(parent));
}

/// Forget the link `parent → child`. Must be called with TOPOLOGY held.
pub(crate) fn unlink(parent: &EpInner, child: &EpInner) {
    crate::loom::lock(&parent.links)
        .children
        .retain(|w| w.upgrade().is_some_and(|c| c.id != child.id));
    crate::loom::lock(&child.links)
        .parents
        .retain(|w| w.upgrade().is_some_and(|p| p.id != parent.id));
}

/// Take the global topology lock.
pub(crate) fn lock() -> std::sync::MutexGuard<'static, ()> {
    TOPOLOGY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
