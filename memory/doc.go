// Package memory keeps what a user's agents want to remember: short texts
// with tags, recalled by search.
//
// A memory is a text of at most MaxTextBytes with up to MaxTags tags, a
// free-text source (where the agent learnt it), the writer the server
// derives from the caller (an agent's access token, the web shell, a
// background run, a workspace key), timestamps, and a status: active, or
// archived (kept, but left out of searches unless asked for). The
// capabilities memorySave, memorySearch, memoryGet, memoryUpdate,
// memoryDelete and memoryList act on the caller's own memories only: every
// query carries the owner filter, and another user's memory id answers
// exactly like an id that does not exist. memoryList's cursors name the
// last memory shown (its creation time and id), never a row id of the
// table.
//
// Search needs no external service. It finds words with the database's
// own full-text index (SQLite's FTS5, PostgreSQL's tsvector with a GIN
// index) and ranks with statistics of the caller's memories only: each
// query word scores its rarity among them (an inverse document frequency,
// from per-user counts the database keeps) in every memory holding it.
// Every query is bounded to the owner: on SQLite the index's rowids carry
// the owner and the status, so a search reads only the owner's range of
// each word's entries; on PostgreSQL the owner column is in the same
// query; the memories returned are read again with the owner filter. The
// words of a query are only ever words: each is quoted (FTS5) or passed
// through plainto_tsquery (PostgreSQL), so no query text is read as search
// syntax. Matching is any-word, ranked so that memories holding more (and
// rarer) of the words come first. On SQLite the IndexSchedule lane keeps
// the index merged (CompactIndex).
//
// With an Embedder configured (OpenAIEmbedder speaks the common
// OpenAI-compatible embeddings API), each memory's text is also embedded
// and the vector stored beside it; a search then fuses the full-text
// ranking with cosine similarity by reciprocal rank fusion. A fingerprint
// of the model, the dimensions and the text keeps unchanged memories from
// being embedded again, and the reindex lane (Service.Reindex, run by
// Schedule) re-embeds, a bounded batch at a time, what a model change made
// stale. Vectors are derived data: they are deleted with their memory and
// the account, and never exported.
//
// Memories are also MCP resources (memory://<id>, and memory://index
// listing the caller's own) and the prompt "memories" renders the
// memories most relevant to a topic as prompt messages.
package memory
