//! The ready list and the overflow list (`rdllist`, `ovflist`), guarded by `EpInner::ready`.

use std::collections::VecDeque;
use std::sync::Arc;

use super::item::{Item, LINKED, OVF};

/// Guarded by `EpInner::ready` (the kernel's `ep->lock`).
#[derive(Default)]
pub(crate) struct ReadyState {
    /// Items that may be ready, in arrival order; each at most once (`LINKED`).
    pub(crate) list: VecDeque<Arc<Item>>,
    /// While a scan runs (`ovf_active`), wakes are chained here in arrival order instead.
    pub(crate) ovf: Vec<Arc<Item>>,
    pub(crate) ovf_active: bool,
    /// A recycled buffer for the harvester's transfer list.
    pub(crate) spare: VecDeque<Arc<Item>>,
}

impl ReadyState {
    /// Queue `item` (the callback's step 4): on the overflow list while a scan is active,
    /// else at the tail of the ready list, unless it is already there. Must be called with
    /// `EpInner::ready` held.
    pub(crate) fn queue(&mut self, item: &Item) {
        if self.ovf_active {
            if !item.flag(OVF) {
                if let Some(me) = item.me.upgrade() {
                    item.set_flag(OVF, true);
                    self.ovf.push(me);
                }
            }
        } else if !item.flag(LINKED) {
            if let Some(me) = item.me.upgrade() {
                item.set_flag(LINKED, true);
                self.list.push_back(me);
            }
        }
    }

    /// `ep_start_scan`: hand the ready list to the harvester, turn the overflow list on.
    pub(crate) fn start_scan(&mut self) -> VecDeque<Arc<Item>> {
        debug_assert!(
            !self.ovf_active,
            "scans are serialised by EpInner::registry"
        );
        self.ovf_active = true;
        let spare = std::mem::take(&mut self.spare);
        std::mem::replace(&mut self.list, spare)
    }

    /// `ep_done_scan`: the ready list becomes `[leftovers] ++ [overflow arrivals] ++ [requeued]`
    /// where `requeued` is what the harvester put back (level-triggered items), each item
    /// once.
    pub(crate) fn done_scan(
        &mut self,
        mut leftovers: VecDeque<Arc<Item>>,
        requeued: &mut Vec<Arc<Item>>,
    ) {
        self.ovf_active = false;
        debug_assert!(self.list.is_empty(), "wakes go to ovf during a scan");
        for it in self.ovf.drain(..) {
            it.set_flag(OVF, false);
            if !it.flag(LINKED) {
                it.set_flag(LINKED, true);
                leftovers.push_back(it);
            }
        }
        leftovers.extend(requeued.drain(..));
        let empty = std::mem::replace(&mut self.list, leftovers);
        debug_assert!(empty.is_empty());
        self.spare = empty;
    }
}
