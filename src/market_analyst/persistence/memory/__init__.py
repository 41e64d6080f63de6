"""The memory store: what people said in earlier threads, recalled by meaning and by words.

`base` holds the rules its two engines share; `edge` (a Qdrant Edge shard in the data directory, with
`owners`, who has memories) and `server` (a Qdrant server) are the twins. `search` composes a recall,
`points` maps a memory to its payload, `embedder` makes its dense vectors."""
