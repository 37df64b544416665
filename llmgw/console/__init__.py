"""`sudo llmgw`: the console on a control plane, the node's overview on a node (urwid).

The console is a client of the admin API (llmgw.control.adminclient), the
same calls `llmgw ctl` makes, so a screen and a command never disagree.
Every call runs on a worker thread: urwid's loop keeps drawing and taking
keys while a control plane takes its time to answer. The node's overview
reads the agent's own files on this machine, with no token.

dispatch.py chooses what opens; ui.py is the frame every screen lives in;
one module a screen.
"""
