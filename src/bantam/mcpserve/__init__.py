"""`bantam mcp`: the front end of MCP, apart from the client it uses (bantam.mcp).

    cli.py      `bantam mcp [serve|list|trust]`, and the /mcp listing of the terminal, the
                browser view and an editor
    serve.py    `bantam mcp serve`: bantam's tools and a run_task tool over stdio

A front end of its own, so that the client half (bantam.mcp, which the session builder uses)
never imports a front end: tests/test_layers.py fails when a package holds modules of two
layers without a reason written there.
"""
