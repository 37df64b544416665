"""llmgw's tests: a package, so that `from tests.support.servers import Server` reads the same in every directory."""
