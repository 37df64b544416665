"""The `llmgw` command: argparse subcommands, each thin: parse, call a package, print."""
