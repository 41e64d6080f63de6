"""The last of the CLI harness's preloads (`crashkit.PRELOAD`): what every child would otherwise do
again, done once in the fork server, and the server's heap set aside from the garbage collector.

- The default embedder's model is loaded into the process-wide cache (`load_wordllama`), so that a
  child that recalls or remembers does not parse the tokenizer and convert the weights again (about
  0.1 s of CPU a command).
- The CLI's Click command is built (`market_analyst.cli.command`), which Typer does by reading every
  command's signature.
- `gc.freeze()` moves every object the preloads made into the collector's permanent generation. A
  child's first full collection would otherwise walk all of them, and writing each object's GC
  header copies its page out of the memory it shares with the server: that walk cost a child more
  than the imports it saves, and is why `analyze` and `approve` took two to three times the CPU in a
  child that they take in a warm process.
"""

import gc

from market_analyst.cli import command
from market_analyst.persistence.memory.embedder import load_wordllama

load_wordllama()
command()
gc.freeze()
