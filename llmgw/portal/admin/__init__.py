"""The admin pages at /admin, by role (docs/portal.md, "Admin pages").

Each module here registers its own pages and nav entries; llmgw.portal.mount
imports every module of this package.
"""
