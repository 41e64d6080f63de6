"""The memory store: what people said in earlier threads, recalled by meaning and by words."""
