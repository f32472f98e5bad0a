//! Iteration over the tables: [`RawIter`], [`RawIterMut`] and [`RawDrain`]
//! over a [`RawDict`](super::RawDict)'s nodes, [`Iter`], [`IterMut`] and
//! [`Drain`] over a [`Dict`](super::Dict)'s entries, and [`WalkPos`], where
//! a resumable `walk` continues. Every iterator knows its exact length
//! (`ExactSizeIterator`) and drains chains iteratively.

use std::iter::FusedIterator;

use super::buckets::{put_link, Seg};
use super::node::Node;
use super::{ChainNode, ChainNodeMut};

/// Iterator over a [`RawDict`](super::RawDict)'s nodes; see [`RawDict::iter`](super::RawDict::iter).
pub struct RawIter<'a, N: ChainNode> {
    pub(super) segs: std::slice::Iter<'a, Seg<N>>,
    pub(super) buckets: std::slice::Iter<'a, Option<N>>,
    /// The link to the next node of the current chain (`None` at its end).
    pub(super) link: &'a Option<N>,
    pub(super) remaining: usize,
}

impl<'a, N: ChainNode> Iterator for RawIter<'a, N> {
    type Item = &'a N;

    #[inline]
    fn next(&mut self) -> Option<&'a N> {
        loop {
            if let Some(node) = self.link {
                self.link = node.next();
                self.remaining = self.remaining.saturating_sub(1);
                return Some(node);
            }
            if self.remaining == 0 {
                return None;
            }
            match self.buckets.next() {
                Some(slot) => self.link = slot,
                None => self.buckets = self.segs.next()?.buckets.iter(),
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<N: ChainNode> ExactSizeIterator for RawIter<'_, N> {}
impl<N: ChainNode> FusedIterator for RawIter<'_, N> {}

/// Iterator over a [`RawDict`](super::RawDict)'s nodes' payloads; see
/// [`RawDict::iter_mut`](super::RawDict::iter_mut).
pub struct RawIterMut<'a, N: ChainNode> {
    pub(super) segs: std::slice::IterMut<'a, Seg<N>>,
    pub(super) buckets: std::slice::IterMut<'a, Option<N>>,
    pub(super) cur: Option<&'a mut N>,
    pub(super) remaining: usize,
}

impl<'a, N: ChainNodeMut> Iterator for RawIterMut<'a, N> {
    type Item = N::PayloadMut<'a>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(node) = self.cur.take() {
                let (next, payload) = node.link_and_payload_mut();
                self.cur = next.as_mut();
                self.remaining = self.remaining.saturating_sub(1);
                return Some(payload);
            }
            if self.remaining == 0 {
                return None;
            }
            match self.buckets.next() {
                Some(slot) => self.cur = slot.as_mut(),
                None => self.buckets = self.segs.next()?.buckets.iter_mut(),
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<N: ChainNodeMut> ExactSizeIterator for RawIterMut<'_, N> {}
impl<N: ChainNodeMut> FusedIterator for RawIterMut<'_, N> {}

/// Owning iterator over a [`RawDict`](super::RawDict)'s nodes, each unlinked; see
/// [`RawDict::drain`](super::RawDict::drain). Nodes left when it is dropped are dropped
/// (iteratively).
pub struct RawDrain<N: ChainNode> {
    segs: Vec<Seg<N>>,
    /// Position: segment and bucket within it.
    seg: usize,
    bucket: usize,
    remaining: usize,
}

impl<N: ChainNode> RawDrain<N> {
    pub(super) fn new(segs: Vec<Seg<N>>, remaining: usize) -> Self {
        RawDrain {
            segs,
            seg: 0,
            bucket: 0,
            remaining,
        }
    }
}

impl<N: ChainNode> Iterator for RawDrain<N> {
    type Item = N;

    fn next(&mut self) -> Option<N> {
        while self.remaining > 0 {
            let seg = self.segs.get_mut(self.seg)?;
            match seg.buckets.get_mut(self.bucket) {
                Some(slot) => match slot.take() {
                    Some(mut node) => {
                        put_link(slot, node.next_mut().take());
                        self.remaining -= 1;
                        return Some(node);
                    }
                    None => self.bucket += 1,
                },
                None => {
                    self.seg += 1;
                    self.bucket = 0;
                }
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<N: ChainNode> ExactSizeIterator for RawDrain<N> {}
impl<N: ChainNode> FusedIterator for RawDrain<N> {}

/// Where a [`Dict::walk`](super::Dict::walk) (or [`RawDict::walk`](super::RawDict::walk)) resumes: a bucket, and how
/// many nodes of its chain were visited. `WalkPos::default()` is the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkPos {
    pub(super) bucket: usize,
    pub(super) skip: usize,
}

/// Iterator over `(&K, &V)`; see [`Dict::iter`](super::Dict::iter).
pub struct Iter<'a, K, V> {
    pub(super) raw: RawIter<'a, Box<Node<K, V>>>,
}

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.raw.next().map(|node| (&node.key, &node.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.raw.size_hint()
    }
}

impl<K, V> ExactSizeIterator for Iter<'_, K, V> {}
impl<K, V> FusedIterator for Iter<'_, K, V> {}

/// Iterator over `(&K, &mut V)`; see [`Dict::iter_mut`](super::Dict::iter_mut).
pub struct IterMut<'a, K, V> {
    pub(super) raw: RawIterMut<'a, Box<Node<K, V>>>,
}

impl<'a, K, V> Iterator for IterMut<'a, K, V> {
    type Item = (&'a K, &'a mut V);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.raw.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.raw.size_hint()
    }
}

impl<K, V> ExactSizeIterator for IterMut<'_, K, V> {}
impl<K, V> FusedIterator for IterMut<'_, K, V> {}

/// Owning iterator over all entries; see [`Dict::drain`](super::Dict::drain). Entries left when
/// it is dropped are dropped (iteratively).
pub struct Drain<K, V> {
    pub(super) raw: RawDrain<Box<Node<K, V>>>,
}

impl<K, V> Drain<K, V> {
    /// A drain of a bucket array built by hand (the white-box tests).
    #[cfg(test)]
    pub(super) fn new(segs: Vec<Seg<Box<Node<K, V>>>>, remaining: usize) -> Self {
        Drain {
            raw: RawDrain::new(segs, remaining),
        }
    }
}

impl<K, V> Iterator for Drain<K, V> {
    type Item = (K, V);

    #[inline]
    fn next(&mut self) -> Option<(K, V)> {
        let Node { key, value, .. } = *self.raw.next()?;
        Some((key, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.raw.size_hint()
    }
}

impl<K, V> ExactSizeIterator for Drain<K, V> {}
impl<K, V> FusedIterator for Drain<K, V> {}
