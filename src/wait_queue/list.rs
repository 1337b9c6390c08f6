//! A plain `&mut self` list of wait entries: an index-linked doubly linked list in a `Vec`
//! slab, so that insertion at either end and removal by key are O(1) and need no `unsafe`.
//!
//! It also keeps, per event bit, how many entries want that bit, so that the locked layer
//! (`super::WaitQueue`) can publish the union of all masks in one atomic word.

use crate::events::Events;

const NIL: u32 = u32::MAX;

/// Names one entry. The generation makes a stale key (its entry already woken and removed,
/// its slot reused) harmless: it simply no longer finds anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    idx: u32,
    gen: u32,
}

#[derive(Debug)]
struct Node<T> {
    prev: u32,
    next: u32,
    gen: u32,
    /// `None` while the slot is free.
    val: Option<(Events, T)>,
}

/// The list. `T` is what an entry carries besides its mask (a wake target).
#[derive(Debug)]
pub(crate) struct List<T> {
    nodes: Vec<Node<T>>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    len: usize,
    /// `bit_count[b]` = number of entries whose mask has bit `b`.
    bit_count: [u32; 32],
    /// The bits `b` with `bit_count[b] != 0` (the union), kept in step by `count_bits`.
    union: u32,
}

impl<T> Default for List<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> List<T> {
    pub(crate) const fn new() -> Self {
        List {
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
            bit_count: [0; 32],
            union: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The union of every entry's mask.
    pub(crate) fn union(&self) -> Events {
        Events::from_bits_retain(self.union)
    }

    fn count_bits(&mut self, mask: Events, add: bool) {
        let mut m = mask.bits();
        while m != 0 {
            let b = m.trailing_zeros() as usize;
            if add {
                self.bit_count[b] += 1;
                self.union |= 1 << b;
            } else {
                self.bit_count[b] -= 1;
                if self.bit_count[b] == 0 {
                    self.union &= !(1 << b);
                }
            }
            m &= m - 1;
        }
    }

    fn alloc(&mut self, mask: Events, val: T) -> u32 {
        self.count_bits(mask, true);
        self.len += 1;
        if let Some(i) = self.free.pop() {
            let n = &mut self.nodes[i as usize];
            n.val = Some((mask, val));
            i
        } else {
            let i =
                u32::try_from(self.nodes.len()).expect("wait queue holds fewer than 2^32 entries");
            assert!(i != NIL, "wait queue holds fewer than 2^32 - 1 entries");
            self.nodes.push(Node {
                prev: NIL,
                next: NIL,
                gen: 0,
                val: Some((mask, val)),
            });
            i
        }
    }

    /// Append at the tail.
    pub(crate) fn push_back(&mut self, mask: Events, val: T) -> Key {
        self.push(mask, val, false)
    }

    /// Insert at the head.
    pub(crate) fn push_front(&mut self, mask: Events, val: T) -> Key {
        self.push(mask, val, true)
    }

    /// Link a new node at the head (`front`) or at the tail.
    #[inline]
    fn push(&mut self, mask: Events, val: T, front: bool) -> Key {
        let i = self.alloc(mask, val);
        let (prev, next) = if front {
            (NIL, self.head)
        } else {
            (self.tail, NIL)
        };
        {
            let n = &mut self.nodes[i as usize];
            n.prev = prev;
            n.next = next;
        }
        if prev == NIL {
            self.head = i;
        } else {
            self.nodes[prev as usize].next = i;
        }
        if next == NIL {
            self.tail = i;
        } else {
            self.nodes[next as usize].prev = i;
        }
        Key {
            idx: i,
            gen: self.nodes[i as usize].gen,
        }
    }

    fn live(&self, k: Key) -> bool {
        self.nodes
            .get(k.idx as usize)
            .is_some_and(|n| n.gen == k.gen && n.val.is_some())
    }

    /// Remove an entry; `None` if the key is stale (already removed).
    pub(crate) fn remove(&mut self, k: Key) -> Option<(Events, T)> {
        if !self.live(k) {
            return None;
        }
        Some(self.unlink(k.idx))
    }

    fn unlink(&mut self, i: u32) -> (Events, T) {
        let (prev, next) = {
            let n = &self.nodes[i as usize];
            (n.prev, n.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
        let n = &mut self.nodes[i as usize];
        n.gen = n.gen.wrapping_add(1);
        n.prev = NIL;
        n.next = NIL;
        let (mask, val) = n.val.take().expect("unlink of a live node");
        self.free.push(i);
        self.len -= 1;
        self.count_bits(mask, false);
        (mask, val)
    }

    /// Mutable access to a live entry's value.
    pub(crate) fn get_mut(&mut self, k: Key) -> Option<&mut T> {
        if !self.live(k) {
            return None;
        }
        self.nodes[k.idx as usize].val.as_mut().map(|(_, v)| v)
    }

    /// Replace a live entry's mask. Returns `false` for a stale key.
    pub(crate) fn set_mask(&mut self, k: Key, mask: Events) -> bool {
        if !self.live(k) {
            return false;
        }
        let old = self.nodes[k.idx as usize]
            .val
            .as_ref()
            .map(|(m, _)| *m)
            .unwrap_or_default();
        self.count_bits(old, false);
        self.count_bits(mask, true);
        if let Some((m, _)) = self.nodes[k.idx as usize].val.as_mut() {
            *m = mask;
        }
        true
    }

    /// Walk from head to tail. `f` sees each entry and says what to do with it; the walk
    /// stops after an entry for which `f` returns [`Visit::Stop`] or [`Visit::RemoveStop`].
    /// Removed entries are handed to `on_removed`. Both closures get `cx`, so that they can
    /// share one piece of mutable state (the wake batch) without a `RefCell`.
    ///
    /// Inlined: it has one caller (`WaitQueue::wake_locked`), on every wake that takes the
    /// lock, and outlining it costs ~50 instructions per wake.
    #[inline(always)]
    pub(crate) fn walk<C>(
        &mut self,
        cx: &mut C,
        mut f: impl FnMut(Events, &mut T, &mut C) -> Visit,
        mut on_removed: impl FnMut(T, &mut C),
    ) {
        let mut i = self.head;
        while i != NIL {
            let next = self.nodes[i as usize].next;
            let visit = {
                let (mask, val) = self.nodes[i as usize]
                    .val
                    .as_mut()
                    .expect("linked node is live");
                f(*mask, val, cx)
            };
            match visit {
                Visit::Keep => {}
                Visit::Stop => return,
                Visit::Remove => on_removed(self.unlink(i).1, cx),
                Visit::RemoveStop => {
                    on_removed(self.unlink(i).1, cx);
                    return;
                }
            }
            i = next;
        }
    }

    /// The entries, head to tail, with their masks.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Events, &T)> + '_ {
        let mut i = self.head;
        std::iter::from_fn(move || {
            if i == NIL {
                return None;
            }
            let n = &self.nodes[i as usize];
            i = n.next;
            n.val.as_ref().map(|(m, v)| (*m, v))
        })
    }

    /// Remove every entry, head first.
    pub(crate) fn drain(&mut self) -> Vec<(Events, T)> {
        let mut out = Vec::with_capacity(self.len);
        while self.head != NIL {
            out.push(self.unlink(self.head));
        }
        out
    }
}

/// What [`List::walk`] does with the entry just visited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Visit {
    Keep,
    Stop,
    Remove,
    RemoveStop,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn order(l: &mut List<u32>) -> Vec<u32> {
        let mut v = Vec::new();
        l.walk(
            &mut v,
            |_, x, v| {
                v.push(*x);
                Visit::Keep
            },
            |_, _| {},
        );
        v
    }

    #[test]
    fn push_remove_order_and_union() {
        let mut l = List::new();
        let a = l.push_back(Events::IN, 1);
        let b = l.push_back(Events::OUT, 2);
        let c = l.push_front(Events::IN | Events::PRI, 0);
        assert_eq!(order(&mut l), vec![0, 1, 2]);
        assert_eq!(l.union(), Events::IN | Events::OUT | Events::PRI);
        assert_eq!(l.remove(b), Some((Events::OUT, 2)));
        assert_eq!(l.remove(b), None, "stale key finds nothing");
        assert_eq!(l.union(), Events::IN | Events::PRI);
        assert_eq!(l.remove(c).map(|x| x.1), Some(0));
        assert_eq!(l.union(), Events::IN);
        // slot reuse does not revive the old key
        let d = l.push_back(Events::HUP, 3);
        assert_eq!(l.remove(c), None);
        assert_eq!(order(&mut l), vec![1, 3]);
        assert!(l.set_mask(a, Events::OUT));
        assert_eq!(l.union(), Events::OUT | Events::HUP);
        assert_eq!(l.get_mut(d).copied(), Some(3));
        assert_eq!(l.drain().len(), 2);
        assert!(l.is_empty());
        assert_eq!(l.union(), Events::empty());
    }

    #[test]
    fn walk_remove_and_stop() {
        let mut l = List::new();
        for i in 0..6 {
            l.push_back(Events::IN, i);
        }
        let mut removed = Vec::new();
        l.walk(
            &mut removed,
            |_, x, _| match *x {
                1 | 3 => Visit::Remove,
                4 => Visit::RemoveStop,
                _ => Visit::Keep,
            },
            |x, removed| removed.push(x),
        );
        assert_eq!(removed, vec![1, 3, 4]);
        assert_eq!(order(&mut l), vec![0, 2, 5]);
        assert_eq!(l.len(), 3);
    }

    /// Differential check against a `VecDeque` model over a pseudo-random operation sequence.
    #[test]
    fn matches_vecdeque_model() {
        let mut l: List<u32> = List::new();
        let mut model: VecDeque<(u32, Key)> = VecDeque::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for v in 0..2000u32 {
            match next() % 4 {
                0 => model.push_back((v, l.push_back(Events::from_bits_retain(1 << (v % 5)), v))),
                1 => model.push_front((v, l.push_front(Events::from_bits_retain(1 << (v % 5)), v))),
                _ if !model.is_empty() => {
                    let i = (next() as usize) % model.len();
                    let (val, k) = model.remove(i).unwrap();
                    assert_eq!(l.remove(k).map(|x| x.1), Some(val));
                }
                _ => {}
            }
            assert_eq!(l.len(), model.len());
        }
        let want: Vec<u32> = model.iter().map(|x| x.0).collect();
        assert_eq!(order(&mut l), want);
        let mut u = 0;
        for &(v, _) in &model {
            u |= 1 << (v % 5);
        }
        assert_eq!(l.union().bits(), u);
    }
}
