"""Pictures and meshes as files: PNG and GLB written and read with the standard library alone.

A single floor at the bottom: it imports nothing of llmgw, so the sim's
ComfyUI stand-in and the gateway's image routes both write and read the
same PNG.

    from llmgw.media import encode_png, with_text, read_text, size
    from llmgw.media import with_extras, extras, is_glb      # a mesh's asset.extras
"""

from llmgw.media.glb import extras, is_glb, with_extras
from llmgw.media.png import encode_png, read_text, size, with_text

__all__ = ["extras", "is_glb", "with_extras", "encode_png", "read_text", "size", "with_text"]
