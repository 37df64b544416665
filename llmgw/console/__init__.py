"""The urwid screens of `sudo llmgw`: setup on a bare machine, the console on a set-up one."""
