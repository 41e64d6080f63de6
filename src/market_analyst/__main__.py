"""`python -m market_analyst` runs the CLI."""

from market_analyst.cli import main

main()
