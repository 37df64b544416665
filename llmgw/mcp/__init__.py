"""The MCP gateway at /mcp: the company's MCP servers behind one endpoint, and the cluster's own read-only tools.

    cluster.py    ClusterTools: `llmgw.cluster_status`, `list_nodes`, … answered in the control plane's process
"""
