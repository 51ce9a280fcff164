//! A bounded cache of token embeddings (the char-CNN encoder's output) for inference, in the spirit
//! of AllenNLP's `vocab_to_cache`: the encoder is context-free, so a word seen in an earlier batch
//! need not be encoded again.
//!
//! Least recently used entries are dropped when the cache is full, so its memory stays bounded
//! whatever the input. Values are plain host copies, without gradient: use it for inference only
//! (never while training the token encoder).

use std::num::NonZeroUsize;

use lru::LruCache;

use crate::char_ids::MAX_CHARS_PER_TOKEN;
use crate::error::{ElmoError, Result};

/// Approximate bookkeeping bytes per entry besides its values (key, map and list nodes).
const ENTRY_OVERHEAD_BYTES: usize = 2 * MAX_CHARS_PER_TOKEN + 64;

/// Token char ids (`[u16; 50]`) → token embedding (`[P]`), least recently used dropped first.
pub struct TokenEmbeddingCache {
    /// Grows as tokens come (a bounded `LruCache` would reserve its whole capacity up front).
    entries: LruCache<Box<[u16]>, Box<[f32]>>,
    capacity: NonZeroUsize,
    d_embedding: usize,
    hits: u64,
    misses: u64,
}

impl std::fmt::Debug for TokenEmbeddingCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEmbeddingCache")
            .field("len", &self.entries.len())
            .field("capacity", &self.capacity)
            .field("d_embedding", &self.d_embedding)
            .field("hits", &self.hits)
            .field("misses", &self.misses)
            .finish()
    }
}

impl TokenEmbeddingCache {
    /// A cache of at most `capacity` tokens for embeddings of width `d_embedding`.
    pub fn new(capacity: NonZeroUsize, d_embedding: usize) -> Self {
        Self {
            entries: LruCache::unbounded(),
            capacity,
            d_embedding,
            hits: 0,
            misses: 0,
        }
    }

    /// A cache that holds as many tokens as fit in about `bytes` bytes (`None` when not even one
    /// does, e.g. for a budget of zero).
    pub fn with_memory(bytes: usize, d_embedding: usize) -> Option<Self> {
        let per_entry = d_embedding * std::mem::size_of::<f32>() + ENTRY_OVERHEAD_BYTES;
        NonZeroUsize::new(bytes / per_entry).map(|capacity| Self::new(capacity, d_embedding))
    }

    /// Width of the cached embeddings.
    pub fn d_embedding(&self) -> usize {
        self.d_embedding
    }

    /// Number of cached tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Largest number of cached tokens.
    pub fn capacity(&self) -> usize {
        self.capacity.get()
    }

    /// Look-ups answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Look-ups that had to be encoded so far.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// The cached embedding of a token's char ids (marks it recently used).
    pub fn get(&mut self, char_ids: &[u16]) -> Option<&[f32]> {
        match self.entries.get(char_ids) {
            Some(values) => {
                self.hits += 1;
                Some(values)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Caches the embedding of a token, dropping the least recently used one when full.
    pub fn insert(&mut self, char_ids: &[u16], embedding: &[f32]) -> Result<()> {
        if char_ids.len() != MAX_CHARS_PER_TOKEN || embedding.len() != self.d_embedding {
            return Err(ElmoError::InvalidInput(format!(
                "token cache: a token of {} char ids with an embedding of width {}, expected {} \
                 and {} (a cache serves one model)",
                char_ids.len(),
                embedding.len(),
                MAX_CHARS_PER_TOKEN,
                self.d_embedding
            )));
        }
        self.entries.put(char_ids.into(), embedding.into());
        while self.entries.len() > self.capacity.get() {
            self.entries.pop_lru();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(c: u16) -> Vec<u16> {
        let mut ids = vec![0u16; MAX_CHARS_PER_TOKEN];
        ids[0] = c;
        ids
    }

    #[test]
    fn drops_the_least_recently_used_token_and_counts_lookups() {
        let mut cache = TokenEmbeddingCache::new(NonZeroUsize::new(2).expect("non-zero"), 3);
        cache.insert(&token(1), &[1.0, 1.0, 1.0]).expect("insert");
        cache.insert(&token(2), &[2.0, 2.0, 2.0]).expect("insert");
        assert_eq!(cache.get(&token(1)), Some(&[1.0f32, 1.0, 1.0][..]));
        // Token 2 is now the least recently used one.
        cache.insert(&token(3), &[3.0, 3.0, 3.0]).expect("insert");
        assert_eq!(cache.get(&token(2)), None);
        assert!(cache.get(&token(1)).is_some() && cache.get(&token(3)).is_some());
        assert_eq!((cache.hits(), cache.misses(), cache.len()), (3, 1, 2));
    }

    #[test]
    fn refuses_another_width_and_sizes_itself_by_memory() {
        let mut cache = TokenEmbeddingCache::new(NonZeroUsize::new(4).expect("non-zero"), 3);
        assert!(cache.insert(&token(1), &[1.0, 2.0]).is_err());
        assert!(cache.insert(&token(1)[..10], &[1.0, 2.0, 3.0]).is_err());
        assert!(TokenEmbeddingCache::with_memory(0, 512).is_none());
        let sized = TokenEmbeddingCache::with_memory(64 << 20, 512).expect("cache");
        // 2 KiB of values per token plus bookkeeping: a little under 32 Ki tokens in 64 MiB.
        assert!(
            (30_000..32_768).contains(&sized.capacity()),
            "{}",
            sized.capacity()
        );
    }
}
