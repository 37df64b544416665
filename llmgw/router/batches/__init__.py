"""Files and batches in OpenAI's shapes (docs/batches.md): the client API (api.py), the input file's rules
(inputs.py), where bytes are kept (keeper.py), and the leader's runner (runner.py)."""

from llmgw.router.batches.api import add_routes, own_file
from llmgw.router.batches.keeper import FileKeeper
from llmgw.router.batches.runner import BatchRunner, lowest_band

__all__ = ["BatchRunner", "FileKeeper", "add_routes", "lowest_band", "own_file"]
